/* npy.h: a tiny reader for .npy files (format version 1.0-3.0, little-endian, C order).
 * Enough for the AOT examples' data files; not a general numpy replacement. */
#ifndef NPY_H_INCLUDED
#define NPY_H_INCLUDED

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_DIMS 8

/* Reads `path`, checks that its dtype is `descr` (e.g. "<f4", "<i8") and C order, and returns
 * a malloc'ed buffer with the data (free() it), the shape in shape[0..*ndim-1].
 * NULL on any error (message on stderr). */
static void* npy_load(const char* path, const char* descr, int64_t shape[NPY_MAX_DIMS],
                      int* ndim) {
    unsigned char pre[12];
    char* hdr = NULL;
    char want[64];
    void* data = NULL;
    size_t hlen, elsize, numel = 1, got;
    const char* p;
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); return NULL; }
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\223NUMPY", 6) != 0) goto bad;
    if (pre[6] == 1) hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    else {
        if (fread(pre + 10, 1, 2, f) != 2) goto bad;
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) |
               ((size_t)pre[11] << 24);
    }
    hdr = (char*)malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) goto bad;
    hdr[hlen] = 0;
    snprintf(want, sizeof want, "'descr': '%s'", descr);
    if (!strstr(hdr, want) || !strstr(hdr, "'fortran_order': False")) {
        fprintf(stderr, "%s: expected dtype %s in C order, header is %s\n", path, descr, hdr);
        goto fail;
    }
    p = strstr(hdr, "'shape': (");
    if (!p) goto bad;
    p += 10;
    *ndim = 0;
    while (*p && *p != ')') {
        char* end;
        long long v = strtoll(p, &end, 10);
        if (end == p) { p++; continue; }
        if (*ndim == NPY_MAX_DIMS) goto bad;
        shape[(*ndim)++] = (int64_t)v;
        numel *= (size_t)v;
        p = end;
    }
    elsize = (size_t)(descr[2] - '0');
    data = malloc(numel * elsize > 0 ? numel * elsize : 1);
    if (!data) goto bad;
    got = fread(data, elsize, numel, f);
    if (got != numel) goto bad;
    free(hdr);
    fclose(f);
    return data;
bad:
    fprintf(stderr, "%s: not a readable .npy file\n", path);
fail:
    free(hdr);
    free(data);
    fclose(f);
    return NULL;
}

#endif
