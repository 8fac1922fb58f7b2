// Command estargz-ref writes an eStargz layer from a tar with the
// reference implementation (stargz-snapshotter's estargz package), so
// taskbox's reader is checked against layers it did not make itself
// (test_layer_estargz's reference run). Same usage and output as
// tests/tools/estargz-convert:
//
//	estargz-ref [--chunk-size N] INPUT.tar OUTPUT
//
// writes the layer to OUTPUT and its descriptor (digest, size, the TOC
// digest and uncompressed size annotations) to OUTPUT.json. Built by
// the test with the module cache only (GOPROXY=off): where the module
// is not cached, the test is skipped.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/containerd/stargz-snapshotter/estargz"
)

func convert(in, out string, chunk int) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	blob, err := estargz.Build(io.NewSectionReader(f, 0, st.Size()), estargz.WithChunkSize(chunk))
	if err != nil {
		return err
	}
	defer blob.Close()
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	defer o.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(o, h), blob)
	if err != nil {
		return err
	}
	size, err := blob.UncompressedSize()
	if err != nil {
		return err
	}
	desc := map[string]any{
		"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
		"digest":    "sha256:" + hex.EncodeToString(h.Sum(nil)),
		"size":      n,
		"annotations": map[string]string{
			estargz.TOCJSONDigestAnnotation:         blob.TOCDigest().String(),
			estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(size, 10),
		},
	}
	js, err := json.MarshalIndent(desc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out+".json", append(js, '\n'), 0o644)
}

func main() {
	chunk := flag.Int("chunk-size", 4<<20, "a chunk's bytes, at most")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: estargz-ref [--chunk-size N] INPUT.tar OUTPUT")
		os.Exit(2)
	}
	if err := convert(flag.Arg(0), flag.Arg(1), *chunk); err != nil {
		fmt.Fprintln(os.Stderr, "estargz-ref:", err)
		os.Exit(1)
	}
}
