//@ checkpoint_io.c: part of NAME.c: the JSON buffer, CRC-32, the zip writer and the
//@ checkpoint reader (the rules of graphc/serialization.py's docstring; tests/
//@ test_loader_fuzz.py runs one corpus through this reader and gc.load).
/* ---- checkpoints: JSON buffer, CRC-32, zip writer and reader ---- */
typedef struct { char* p; size_t n, cap; int oom; } jbuf;

static void jb_put(jbuf* b, const char* s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096);
        char* q;
        while (cap < b->n + n + 1) cap *= 2;
        q = (char*)realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void jb_lit(jbuf* b, const char* s) { jb_put(b, s, strlen(s)); }

static void jb_json_string(jbuf* b, const char* s) {
    char tmp[8];
    jb_lit(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { tmp[0] = '\\'; tmp[1] = (char)c; jb_put(b, tmp, 2); }
        else if (c < 32 || c >= 127) { snprintf(tmp, sizeof tmp, "\\u%04x", c); jb_lit(b, tmp); }
        else jb_put(b, (const char*)&c, 1);
    }
    jb_lit(b, "\"");
}

static void jb_double(jbuf* b, double v) {
    char tmp[40];
    if (v != v) { jb_lit(b, "{\"$float\": \"nan\"}"); return; }
    if (v > 1.7976931348623157e308) { jb_lit(b, "{\"$float\": \"inf\"}"); return; }
    if (v < -1.7976931348623157e308) { jb_lit(b, "{\"$float\": \"-inf\"}"); return; }
    snprintf(tmp, sizeof tmp, "%.17g", v);
    jb_lit(b, tmp);
    if (!strpbrk(tmp, ".eE")) jb_lit(b, ".0");
}

static void jb_array(jbuf* b, const @NAME@_state* s, int i) {
    if (!s->present[i]) { jb_lit(b, "null"); return; }
    jb_lit(b, "{\"$array\": ");
    jb_json_string(b, TENSORS[i].name);
    jb_lit(b, "}");
}

static uint32_t crc32_update(uint32_t crc, const unsigned char* p, size_t n) {
    crc = ~crc;
    while (n--) crc = CRC_TABLE[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

static void le16(unsigned char* p, unsigned v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void le32(unsigned char* p, uint32_t v) { le16(p, v & 0xFFFFu); le16(p + 2, v >> 16); }
static unsigned rd16(const unsigned char* p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }
static uint32_t rd32(const unsigned char* p) {
    return (uint32_t)rd16(p) | ((uint32_t)rd16(p + 2) << 16);
}
static uint64_t rd64(const unsigned char* p) {
    return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

typedef struct { char name[512]; uint32_t crc, size, offset; } zentry;

typedef struct {
    FILE* f;
    uint32_t offset;
    zentry* ents;
    size_t n, cap;
    int err;
} zwriter;

static int zw_write(zwriter* z, const void* p, size_t n) {
    if (z->err) return -1;
    if (n && fwrite(p, 1, n, z->f) != n) { z->err = 1; return -1; }
    if ((uint64_t)z->offset + n > 0xFFFFFFFEu) { z->err = 2; return -1; }
    z->offset += (uint32_t)n;
    return 0;
}

/* One stored entry made of a .npy header and a data block. */
static int zw_entry(zwriter* z, const char* name, const char* hdr, size_t hlen,
                    const void* data, size_t dlen) {
    unsigned char lh[30];
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    zentry* e;
    size_t nlen = strlen(name);
    uint64_t size = 10u + (uint64_t)hlen + dlen;
    if (z->err) return -1;
    if (nlen >= sizeof e->name || size > 0xFFFFFFFEu || hlen > 0xFFFFu) { z->err = 2; return -1; }
    if (z->n == z->cap) {
        size_t cap = z->cap ? z->cap * 2 : 16;
        zentry* q = (zentry*)realloc(z->ents, cap * sizeof *q);
        if (!q) { z->err = 3; return -1; }
        z->ents = q;
        z->cap = cap;
    }
    e = &z->ents[z->n++];
    memcpy(e->name, name, nlen + 1);
    le16(pre + 8, (unsigned)hlen);
    e->crc = crc32_update(crc32_update(crc32_update(0, pre, 10), (const unsigned char*)hdr, hlen),
                          (const unsigned char*)data, dlen);
    e->size = (uint32_t)size;
    e->offset = z->offset;
    memset(lh, 0, sizeof lh);
    le32(lh, 0x04034b50u);
    le16(lh + 4, 20);
    le16(lh + 12, 0x21);  /* 1980-01-01 */
    le32(lh + 14, e->crc);
    le32(lh + 18, e->size);
    le32(lh + 22, e->size);
    le16(lh + 26, (unsigned)nlen);
    zw_write(z, lh, 30);
    zw_write(z, name, nlen);
    zw_write(z, pre, 10);
    zw_write(z, hdr, hlen);
    zw_write(z, data, dlen);
    return z->err ? -1 : 0;
}

static int zw_finish(zwriter* z) {
    unsigned char ch[46], eocd[22];
    uint32_t start = z->offset;
    size_t i;
    if (z->n > 0xFFFEu) z->err = 2;
    for (i = 0; i < z->n && !z->err; i++) {
        zentry* e = &z->ents[i];
        size_t nlen = strlen(e->name);
        memset(ch, 0, sizeof ch);
        le32(ch, 0x02014b50u);
        le16(ch + 4, 20);
        le16(ch + 6, 20);
        le16(ch + 14, 0x21);
        le32(ch + 16, e->crc);
        le32(ch + 20, e->size);
        le32(ch + 24, e->size);
        le16(ch + 28, (unsigned)nlen);
        le32(ch + 42, e->offset);
        zw_write(z, ch, 46);
        zw_write(z, e->name, nlen);
    }
    memset(eocd, 0, sizeof eocd);
    le32(eocd, 0x06054b50u);
    le16(eocd + 8, (unsigned)z->n);
    le16(eocd + 10, (unsigned)z->n);
    le32(eocd + 12, z->offset - start);
    le32(eocd + 16, start);
    zw_write(z, eocd, 22);
    return z->err ? -1 : 0;
}

/* ---- the checkpoint reader ----
 * It applies the container rules listed in graphc/serialization.py's docstring, in the same
 * order as gc.load, so both readers accept and reject the same files (tests/
 * test_loader_fuzz.py runs one corpus through both). Every bound is written so that it
 * cannot wrap around: `x > size || n > size - x`, never `x + n > size`. */

/* A checked entry: its name (with ".npy") and its .npy image inside the file image. */
typedef struct { const unsigned char* name; size_t nlen; const unsigned char* npy; uint64_t size; }
    zent;

/* A parsed .npy header (the rules: serialization.py's docstring). */
typedef struct {
    char descr[16];
    uint64_t itemsize;
    int fortran, ndim;
    uint64_t shape[32];
    const unsigned char* data;
    uint64_t nbytes;
} npyinfo;

static int lit(const unsigned char** p, const unsigned char* e, const char* s) {
    size_t n = strlen(s);
    if ((size_t)(e - *p) < n || memcmp(*p, s, n) != 0) return 0;
    *p += n;
    return 1;
}

/* A size: decimal, no leading zero, at most 18 digits. */
static int npy_dim(const unsigned char** p, const unsigned char* e, uint64_t* v) {
    const unsigned char* q = *p;
    uint64_t x = 0;
    int k = 0;
    while (q < e && *q >= '0' && *q <= '9') {
        if (k == 18) return 0;
        x = x * 10u + (uint64_t)(*q - '0');
        q++;
        k++;
    }
    if (k == 0 || (k > 1 && **p == '0')) return 0;
    *v = x;
    *p = q;
    return 1;
}

/* The item size of a dtype the format allows (0: not allowed). */
static uint64_t descr_itemsize(const char* d) {
    static const char* const fixed[] = {"|b1", "|i1", "|u1", "<i2", "<i4", "<i8", "<u2",
                                        "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16"};
    static const uint64_t size[] = {1, 1, 1, 2, 4, 8, 2, 4, 8, 2, 4, 8, 8, 16};
    size_t i, n = strlen(d);
    uint64_t v = 0;
    for (i = 0; i < sizeof size / sizeof size[0]; i++)
        if (strcmp(d, fixed[i]) == 0) return size[i];
    if (n < 3 || n > 10 || !((d[0] == '<' && d[1] == 'U') || (d[0] == '|' && d[1] == 'S')) ||
        d[2] < '1' || d[2] > '9')
        return 0;
    for (i = 2; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return 0;
        v = v * 10u + (uint64_t)(d[i] - '0');
    }
    return d[1] == 'U' ? 4u * v : v;
}

/* Parses and checks a .npy image of `size` bytes. Returns 0, or -1 if malformed. */
static int npy_parse(const unsigned char* p, uint64_t size, npyinfo* o) {
    uint64_t hlen, hoff, payload, numel = 1;
    const unsigned char *h, *e;
    size_t dl;
    int i, zero = 0;
    if (size < 10 || memcmp(p, "\223NUMPY", 6) != 0) return -1;
    if (p[6] == 1 && p[7] == 0) { hlen = rd16(p + 8); hoff = 10; }
    else if ((p[6] == 2 || p[6] == 3) && p[7] == 0 && size >= 12) { hlen = rd32(p + 8); hoff = 12; }
    else return -1;
    if (hlen > 4096 || hlen > size - hoff) return -1;
    h = p + hoff;
    e = h + hlen;
    if (!lit(&h, e, "{'descr': '")) return -1;
    for (dl = 0; dl < (size_t)(e - h) && h[dl] != '\''; dl++) {}
    if (dl == (size_t)(e - h) || dl >= sizeof o->descr) return -1;
    memcpy(o->descr, h, dl);
    o->descr[dl] = 0;
    h += dl + 1;
    o->itemsize = descr_itemsize(o->descr);
    if (!o->itemsize || !lit(&h, e, ", 'fortran_order': ")) return -1;
    if (lit(&h, e, "True")) o->fortran = 1;
    else if (lit(&h, e, "False")) o->fortran = 0;
    else return -1;
    if (!lit(&h, e, ", 'shape': (")) return -1;
    o->ndim = 0;
    if (!lit(&h, e, ")")) {
        if (!npy_dim(&h, e, &o->shape[0])) return -1;
        o->ndim = 1;
        if (!lit(&h, e, ",)")) {
            do {
                if (o->ndim == 32 || !lit(&h, e, ", ") || !npy_dim(&h, e, &o->shape[o->ndim]))
                    return -1;
                o->ndim++;
            } while (!lit(&h, e, ")"));
        }
    }
    if (!lit(&h, e, ", }")) return -1;
    while (h < e && *h == ' ') h++;
    if (e - h != 1 || *h != '\n') return -1;
    payload = size - hoff - hlen;
    for (i = 0; i < o->ndim; i++) if (o->shape[i] == 0) zero = 1;
    if (zero) numel = 0;
    else
        for (i = 0; i < o->ndim; i++) {
            if (numel > payload / o->shape[i]) return -1;
            numel *= o->shape[i];
        }
    if (numel > payload / o->itemsize || numel * o->itemsize != payload) return -1;
    o->data = p + hoff + hlen;
    o->nbytes = payload;
    return 0;
}

static int zent_cmp(const void* a, const void* b) {
    const zent* x = (const zent*)a;
    const zent* y = (const zent*)b;
    if (x->nlen != y->nlen) return x->nlen < y->nlen ? -1 : 1;
    return memcmp(x->name, y->name, x->nlen);
}

/* Checks the whole zip image and lists its entries, sorted by name (*out: malloc'ed).
 * Returns 0, -1 malformed, -2 out of memory. */
static int zip_index(const unsigned char* img, size_t len, zent** out, size_t* nout) {
    size_t eocd;
    uint64_t count, cd, cd_size, pos, end, k;
    zent* ents;
    npyinfo info;
    *out = NULL;
    *nout = 0;
    if (len < 22 || rd32(img) != 0x04034b50u) return -1;  /* np.load sniffs these bytes */
    eocd = len - 22;  /* no archive comment: the end record is the last 22 bytes */
    if (rd32(img + eocd) != 0x06054b50u || rd16(img + eocd + 20) != 0) return -1;
    count = rd16(img + eocd + 10);
    cd_size = rd32(img + eocd + 12);
    cd = rd32(img + eocd + 16);
    if (rd16(img + eocd + 4) || rd16(img + eocd + 6) || rd16(img + eocd + 8) != count) return -1;
    end = eocd;
    if (eocd >= 20 && rd32(img + eocd - 20) == 0x07064b50u) {  /* zip64 locator */
        uint64_t z64 = rd64(img + eocd - 12);
        if (rd32(img + eocd - 16) != 0 || rd32(img + eocd - 4) > 1) return -1;
        if (eocd - 20 < 56 || z64 != eocd - 20 - 56 || rd32(img + z64) != 0x06064b50u) return -1;
        count = rd64(img + z64 + 32);
        cd_size = rd64(img + z64 + 40);
        cd = rd64(img + z64 + 48);
        end = z64;
    }
    if (cd > end || cd_size != end - cd) return -1;
    if (count > cd_size / 46) return -1;
    ents = (zent*)malloc((size_t)(count ? count : 1) * sizeof *ents);
    if (!ents) return -2;
    pos = cd;
    for (k = 0; k < count; k++) {
        unsigned needed, flags, method, fl, el, cl;
        uint64_t v[3], crc, off, lpos;
        int big[3], j;
        const unsigned char *x, *xe, *name;
        if (46 > end - pos || rd32(img + pos) != 0x02014b50u) goto bad;
        needed = img[pos + 6];
        flags = rd16(img + pos + 8);
        method = rd16(img + pos + 10);
        crc = rd32(img + pos + 16);
        v[1] = rd32(img + pos + 20);  /* compressed size */
        v[0] = rd32(img + pos + 24);  /* uncompressed size */
        fl = rd16(img + pos + 28);
        el = rd16(img + pos + 30);
        cl = rd16(img + pos + 32);
        v[2] = rd32(img + pos + 42);  /* local header offset */
        if ((uint64_t)fl + el + cl > end - pos - 46) goto bad;
        name = img + pos + 46;
        for (j = 0; j < 3; j++) big[j] = v[j] == 0xFFFFFFFFu;
        x = name + fl;
        xe = x + el;
        while (x < xe) {
            const unsigned char *f, *fe;
            if (xe - x < 4 || rd16(x + 2) > (size_t)(xe - x) - 4) goto bad;
            if (rd16(x) == 1) {  /* zip64: the 0xFFFFFFFF fields, in order */
                f = x + 4;
                fe = f + rd16(x + 2);
                for (j = 0; j < 3; j++)
                    if (v[j] == 0xFFFFFFFFu && fe - f >= 8) { v[j] = rd64(f); big[j] = 0; f += 8; }
            }
            x += 4 + rd16(x + 2);
        }
        if (big[0] || big[1] || big[2]) goto bad;
        if (needed > 63 || (flags & ~0x0808u) || method != 0 || v[0] != v[1]) goto bad;
        if (fl < 5 || memcmp(name + fl - 4, ".npy", 4) != 0) goto bad;
        for (j = 0; j < (int)fl; j++)
            if (name[j] < 32 || name[j] > 126) goto bad;  /* printable ASCII names only */
        off = v[2];
        if (len < 30 || off > len - 30 || rd32(img + off) != 0x04034b50u ||
            rd16(img + off + 8) != 0)
            goto bad;
        if (rd16(img + off + 26) != fl || fl > len - off - 30 ||
            memcmp(img + off + 30, name, fl) != 0)
            goto bad;
        lpos = off + 30 + fl + rd16(img + off + 28);
        if (lpos > cd || v[1] > cd - lpos) goto bad;
        if (crc32_update(0, img + lpos, (size_t)v[1]) != crc) goto bad;
        if (npy_parse(img + lpos, v[1], &info) != 0) goto bad;
        ents[k].name = name;
        ents[k].nlen = fl;
        ents[k].npy = img + lpos;
        ents[k].size = v[1];
        pos += 46u + fl + el + cl;
    }
    if (pos != end) goto bad;
    qsort(ents, (size_t)count, sizeof *ents, zent_cmp);
    for (k = 1; k < count; k++)
        if (zent_cmp(&ents[k - 1], &ents[k]) == 0) goto bad;  /* duplicate names */
    *out = ents;
    *nout = (size_t)count;
    return 0;
bad:
    free(ents);
    return -1;
}

/* The entry named `name` in a sorted index, or NULL. */
static const zent* zip_lookup(const zent* ents, size_t n, const char* name) {
    zent key;
    key.name = (const unsigned char*)name;
    key.nlen = strlen(name);
    key.npy = NULL;
    key.size = 0;
    return (const zent*)bsearch(&key, ents, n, sizeof *ents, zent_cmp);
}

/* Whether entry `e` (already checked by zip_index) holds `descr` with this shape. */
static int npy_matches(const zent* e, const char* descr, const int64_t* shape, int ndim,
                       npyinfo* info) {
    int i;
    if (npy_parse(e->npy, e->size, info) != 0 || strcmp(info->descr, descr) != 0 ||
        info->ndim != ndim)
        return 0;
    for (i = 0; i < ndim; i++)
        if ((int64_t)info->shape[i] != shape[i]) return 0;
    return 1;
}

/* Copies a Fortran-order array into C order. */
static void copy_fortran(unsigned char* dst, const npyinfo* a) {
    uint64_t n = 1, i, fs[32], idx[32];
    int k;
    for (k = 0; k < a->ndim; k++) { fs[k] = n; n *= a->shape[k]; idx[k] = 0; }
    for (i = 0; i < n; i++) {
        uint64_t o = 0;
        for (k = 0; k < a->ndim; k++) o += idx[k] * fs[k];
        memcpy(dst + i * a->itemsize, a->data + o * a->itemsize, (size_t)a->itemsize);
        for (k = a->ndim - 1; k >= 0; k--) {
            if (++idx[k] < a->shape[k]) break;
            idx[k] = 0;
        }
    }
}
