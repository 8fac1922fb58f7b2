/*
 * helpers.c: see helpers.h.
 */
#include "helpers.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *th_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f) {
		fprintf(stderr, "cannot open %s\n", path);
		abort();
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		abort();
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

uint8_t *th_read_hex(const char *path, size_t *len)
{
	size_t tlen, n = 0;
	char *text = th_read_file(path, &tlen);
	uint8_t *out = malloc(tlen / 2 + 1);
	int hi = -1;

	for (size_t i = 0; i < tlen; i++) {
		char c = text[i];
		int v;
		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else
			continue;
		if (hi < 0) {
			hi = v;
		} else {
			out[n++] = (uint8_t)(hi << 4 | v);
			hi = -1;
		}
	}
	free(text);
	*len = n;
	return out;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **th_examples(const char *suffix)
{
	const char *dir = TB_SOURCE_DIR "/schemas/examples";
	char **list = calloc(256, sizeof(char *));
	size_t n = 0, sl = strlen(suffix);
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d || !list)
		abort();
	while ((de = readdir(d)) && n < 255) {
		size_t l = strlen(de->d_name);
		if (l > sl && strcmp(de->d_name + l - sl, suffix) == 0) {
			size_t cap = strlen(dir) + l + 2;
			list[n] = malloc(cap);
			snprintf(list[n++], cap, "%s/%s", dir, de->d_name);
		}
	}
	closedir(d);
	qsort(list, n, sizeof(char *), by_name);
	return list;
}

void th_free_list(char **list)
{
	for (size_t i = 0; list[i]; i++)
		free(list[i]);
	free(list);
}
