#!/usr/bin/env bash
# The Debian package as an operator meets it: built exactly as
# docs/releasing.md says (CPack, deploy/debian/package.cmake), its control data
# checked (Depends from the shared libraries, conffiles, maintainer
# scripts), installed with dpkg -i into this machine's root, run (its
# --version, its configuration validated, the demo from / with the source
# and build trees hidden, the unit installed and not enabled, and with
# the services tests/run starts a worker taking a task), then
# removed (conffiles kept) and purged (nothing of it left).
# Usage: package_deb.sh SOURCE_DIR. As root; skips (77) without dpkg, or
# when a taskbox package is already installed (it is not replaced).
set -u
root=$1
[ "$(id -u)" = 0 ] || { echo "skipped: dpkg -i needs root"; exit 77; }
for t in dpkg dpkg-deb dpkg-shlibdeps cmake unshare; do
  command -v "$t" >/dev/null || { echo "skipped: no $t"; exit 77; }
done
if dpkg-query -W -f '${Status}' taskbox 2>/dev/null | grep -q installed; then
  echo "skipped: a taskbox package is installed here; not replacing it"; exit 77
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d /tmp/tb-deb-XXXXXX)
installed=0 worker=
cleanup() {
  [ -n "$worker" ] && kill "$worker" 2>/dev/null && wait "$worker"
  # never leave the package behind, whatever failed
  [ "$installed" = 1 ] && dpkg --purge taskbox >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
export LSAN_OPTIONS=detect_leaks=0

# 1. Build it (docs/releasing.md).
if cmake -S "$root" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF >"$tmp/build.log" 2>&1 &&
   cmake --build "$tmp/build" --target package >>"$tmp/build.log" 2>&1; then ok; else
  bad "the package build"; tail -30 "$tmp/build.log"; exit 1; fi
version=$(sed -n 's/^project(taskbox VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
deb="$tmp/build/taskbox_${version}-1_$(dpkg --print-architecture).deb"
[ -f "$deb" ] || { bad "no $deb"; ls "$tmp/build"; exit 1; }

# 2. What it declares.
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = taskbox ] && ok || bad "Package: $(field Package)"
[ "$(field Version)" = "$version-1" ] && ok || bad "Version: $(field Version)"
for lib in librdkafka1 libgit2-1.5 libseccomp2 libhiredis0.14 libs3-2 libmsgpackc2 libc6; do
  if field Depends | grep -q "\b$lib\b"; then ok; else bad "Depends lacks $lib: $(field Depends)"; fi
done
dpkg-deb -e "$deb" "$tmp/control"
want_conf="/etc/taskbox/worker.json /etc/taskbox/worker.env"
for f in "$root"/examples/runtimes/*.json; do want_conf="$want_conf /etc/taskbox/runtimes/${f##*/}"; done
for c in $want_conf; do
  if grep -qx "$c" "$tmp/control/conffiles"; then ok; else bad "not a conffile: $c"; fi
done
for s in postinst prerm postrm; do
  if [ -x "$tmp/control/$s" ] && sh -n "$tmp/control/$s"; then ok; else bad "maintainer script $s"; fi
done

# 3. Installed.
if dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1; then ok; installed=1; else
  bad "dpkg -i"; cat "$tmp/dpkg.log"; exit 1; fi
if /usr/bin/taskbox --version | grep -q "^taskbox $version "; then ok; else
  bad "taskbox --version: $(/usr/bin/taskbox --version | head -1)"; fi
# Hardened as Debian asks (CMakeLists.txt, TB_HARDEN): PIE, full RELRO,
# bound now, stack protector, fortified calls, CET where the compiler has
# it. (The sandbox's init and the demo agent are static on purpose: no PIE,
# no dynamic relocations to bind.) Control-flow protection is built
# (-fcf-protection) but not asked of the binary: the linker keeps the
# IBT/SHSTK note only when every object has it, and Debian 12's C start
# files do not.
if command -v hardening-check >/dev/null; then
  if hardening-check --nocfprotection /usr/bin/taskbox >"$tmp/hardening.txt" 2>&1; then ok; else
    bad "hardening-check /usr/bin/taskbox"; cat "$tmp/hardening.txt"; fi
fi
init=/usr/libexec/taskbox/taskbox-sandbox-init
if [ -x $init ]; then ok; else bad "no sandbox init"; fi
# static, with musl (worker/sandbox/init/CMakeLists.txt): glibc's start-up,
# whose messages say "glibc", probes the CPU's caches with CPUID at every
# sandbox's start
if file -L $init | grep -q 'statically linked' && ! grep -qa 'glibc' $init; then ok; else
  bad "the sandbox's init is not static with musl: $(file -L $init)"; fi
if [ "$(stat -c %a /etc/taskbox/worker.env)" = 600 ]; then ok; else
  bad "worker.env is mode $(stat -c %a /etc/taskbox/worker.env), not 600"; fi
if /usr/bin/taskbox schema config /etc/taskbox/worker.json >"$tmp/cfg.log" 2>&1; then ok; else
  bad "the packaged worker.json is refused: $(cat "$tmp/cfg.log")"; fi
for r in /etc/taskbox/runtimes/*.json; do
  if /usr/bin/taskbox schema runtime "$r" >/dev/null 2>&1; then ok; else bad "runtime $r refused"; fi
done
unit=/usr/lib/systemd/system/taskbox-worker.service
if grep -qx 'ExecStart=/usr/bin/taskbox worker --config /etc/taskbox/worker.json' "$unit"; then ok
else bad "the unit's ExecStart: $(grep ExecStart= "$unit" 2>&1)"; fi
if [ ! -e /etc/systemd/system/multi-user.target.wants/taskbox-worker.service ]; then ok; else
  bad "the unit was enabled by the package"; fi
if [ -f /usr/share/doc/taskbox/copyright ]; then ok; else bad "no /usr/share/doc/taskbox/copyright"; fi
# lintian, as a Debian maintainer would run it: clean at --pedantic, each
# choice made on purpose overridden with its reason (deploy/debian/lintian-overrides)
if command -v lintian >/dev/null; then
  if lintian --pedantic --fail-on error,warning,pedantic "$deb" >"$tmp/lintian.txt" 2>&1; then ok; else
    bad "lintian --pedantic"; grep -v 'root privileges' "$tmp/lintian.txt"; fi
fi
# the demo, from the package alone: the source and build trees out of reach
# (a private mount namespace), run from /
unshare -m --propagation private sh -c '
  mount -t tmpfs none "$1" && mount -t tmpfs none "$2" || exit 99
  cd / && /usr/bin/taskbox demo
' sh "$root" "$tmp/build" >"$tmp/demo.log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then ok; else bad "the packaged demo: exit $rc"; tail -30 "$tmp/demo.log"; fi

# a worker from the package against the real services, when tests/run
# started them: the packaged runtimes, a task submitted and followed with
# the packaged client to its outcome
if [ -n "${TASKBOX_TEST_KAFKA:-}" ] && [ -n "${TASKBOX_TEST_S3_ENDPOINT:-}" ]; then
  run=tbdeb-$$
  "$root/deploy/local/services" topic "$run.tasks:1" "$run.events:1" "$run.dlq:1" >/dev/null || bad "topics"
  export AWS_ACCESS_KEY_ID=$TASKBOX_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$TASKBOX_TEST_S3_SECRET_KEY
  curl -sf -X PUT --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$TASKBOX_TEST_S3_ENDPOINT/$run" || bad "bucket"
  git init -q "$tmp/hello" && cp -r /usr/share/taskbox/recipes/hello/. "$tmp/hello/" &&
    git -C "$tmp/hello" add -A &&
    git -C "$tmp/hello" -c user.name=t -c user.email=t@t commit -qm hello || bad "recipe repository"
  chmod 711 "$tmp"
  cat >"$tmp/worker.json" <<EOF
{
  "v": 1, "worker_id": "$run", "slots": 1,
  "kafka": {"brokers": "$TASKBOX_TEST_KAFKA", "group": "$run", "tasks_topic": "$run.tasks",
            "events_topic": "$run.events", "dlq_topic": "$run.dlq"},
  "ledger": {"url": "$TASKBOX_TEST_REDIS", "prefix": "$run"},
  "store": {"url": "s3://$run", "endpoint": "$TASKBOX_TEST_S3_ENDPOINT",
            "region": "$TASKBOX_TEST_S3_REGION"},
  "runtimes_dir": "/etc/taskbox/runtimes", "work_dir": "$tmp/work", "cache_dir": "$tmp/cache",
  "metrics_listen": "127.0.0.1:0"
}
EOF
  /usr/bin/taskbox worker -c "$tmp/worker.json" >"$tmp/worker.log" 2>&1 &
  worker=$!
  if timeout 120 /usr/bin/taskbox submit -wc "$tmp/worker.json" -t 100 --recipe "file://$tmp/hello" \
       --commit "$(git -C "$tmp/hello" rev-parse HEAD)" -p "say hello" >"$tmp/submit.log" 2>&1
  then ok; else bad "a task on the packaged worker: exit $?"; tail -20 "$tmp/submit.log" "$tmp/worker.log"; fi
  kill "$worker" && wait "$worker"
  worker=
fi

# 4. Removed: the programs go, an edited conffile stays; purged: all goes.
echo '{"v": 1, "slots": 2}' >/etc/taskbox/worker.json
mkdir -p /var/lib/taskbox/work /var/cache/taskbox # as the unit's first start makes them
dpkg-query -L taskbox >"$tmp/files"
if dpkg -r taskbox >"$tmp/dpkg.log" 2>&1; then ok; else bad "dpkg -r"; cat "$tmp/dpkg.log"; fi
if [ ! -e /usr/bin/taskbox ] && [ ! -e /usr/libexec/taskbox ] && [ ! -e "$unit" ]; then ok; else
  bad "dpkg -r left programs behind"; fi
if grep -q '"slots": 2' /etc/taskbox/worker.json 2>/dev/null; then ok; else
  bad "dpkg -r did not keep the edited conffile"; fi
if dpkg --purge taskbox >"$tmp/dpkg.log" 2>&1; then ok; installed=0; else
  bad "dpkg --purge"; cat "$tmp/dpkg.log"; fi
left=""
while read -r f; do
  [ "$f" = / ] || [ "$f" = /. ] && continue
  case $f in /etc|/usr|/usr/*/|/usr/bin|/usr/lib|/usr/lib/systemd|/usr/lib/systemd/system|\
    /usr/libexec|/usr/share|/usr/share/doc|/usr/share/man|/usr/share/man/man1|/usr/share/man/man5|\
    /usr/share/lintian|/usr/share/lintian/overrides|\
    /usr/share/bash-completion|/usr/share/bash-completion/completions|/usr/share/zsh|\
    /usr/share/zsh/site-functions) continue;; esac
  [ -e "$f" ] && left="$left $f"
done <"$tmp/files"
for d in /etc/taskbox /var/lib/taskbox /var/cache/taskbox; do [ -e "$d" ] && left="$left $d"; done
if [ -z "$left" ]; then ok; else bad "left after the purge:$left"; fi
if ! dpkg-query -W taskbox >/dev/null 2>&1 || dpkg-query -W -f '${Status}' taskbox | grep -q not-installed
then ok; else bad "dpkg still knows taskbox: $(dpkg-query -W -f '${Status}' taskbox)"; fi

echo "$pass checks passed, $fail failed"
[ "$fail" = 0 ]
