//@ step.h: the template of NAME.h, the documented C interface of one AOT step
//@ (graphc/aot/templates.py describes the markers; graphc/aot/csource.py fills them in).
/* @NAME@.h: a training step compiled ahead of time by graphc (generated; do not edit).
 *
 * The Python step was @STEP_NAME@(@ARG_DOC@).
 * Target: @TARGET@ (LLVM cpu @CPU@). The kernel needs that CPU level or newer.
 * Link: @NAME@.o (position independent, link statically) or lib@NAME@.so, plus -lm.
 *
 * Model. A @NAME@_state holds everything the step reads and writes besides its arguments:
 * parameters, buffers, gradients and optimizer state, initialised from the values they had
 * when the library was built. Every tensor is a C-order array with a fixed shape:
 *
 *   idx  kind   dtype   shape              name
@TENSOR_DOC@ *
 * Gradients and optimizer state also carry a presence flag (PyTorch's ".grad is None" and
 * "no optimizer state yet"). Their buffers always exist; a successful step marks what it
 * wrote as present. The step's structure was fixed at build time by these options:
@BAKED@ * and it requires this gradient presence (else GRAPHC_ESTATE):
@GUARDS@ *
 * Errors. Every function that can fail returns GRAPHC_OK (0) or an error code below. A step
 * that fails leaves the state exactly as it was (the kernel commits its updates only after all
 * of its checks pass).
 *
 * Ownership. Pointers passed in are borrowed for the duration of the call; a state is owned by
 * the caller from @NAME@_create() to @NAME@_destroy(). @NAME@_param_data() pointers are owned by the
 * state and valid until @NAME@_destroy().
 *
 * Threads. All functions are reentrant: distinct states may be used from different threads at
 * the same time. One state must not be used by two threads at once (no locking inside). The
 * metadata functions (@NAME@_num_tensors, @NAME@_tensor, @NAME@_find, @NAME@_default_hyper,
 * @NAME@_strerror) are always thread safe.
 */
#ifndef @NAME_UPPER@_H_INCLUDED
#define @NAME_UPPER@_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

@GRAPHC_AOT_H@

#define @NAME_UPPER@_NUM_TENSORS @NUM_TENSORS@
#define @NAME_UPPER@_NUM_HYPER @NUM_HYPER@
#define @NAME_UPPER@_MAX_RANK @MAX_RANK@

/* Opaque training state (see the top of this file). */
typedef struct @NAME@_state @NAME@_state;

/* Run-time hyperparameters, one double per optimizer setting the step reads at run time. */
typedef struct @NAME@_hyper {
@HYPER_FIELDS@} @NAME@_hyper;

/* Static description of one state tensor. */
typedef struct @NAME@_tensor_info {
    const char* name;   /* e.g. "model.0.weight"; unique */
    int kind;           /* GRAPHC_PARAM, GRAPHC_BUFFER, GRAPHC_GRAD or GRAPHC_OPTIM */
    int dtype;          /* GRAPHC_FLOAT32, ... */
    int ndim;           /* 0 for a scalar */
    int64_t shape[@NAME_UPPER@_MAX_RANK];  /* the first ndim entries are used */
    size_t numel;       /* number of elements (1 for a scalar) */
    size_t nbytes;      /* numel * element size */
} @NAME@_tensor_info;

/* The hyperparameter values the optimizer had when the library was built. */
@NAME@_hyper @NAME@_default_hyper(void);

/* A new state with the build-time values; NULL if out of memory. Free with @NAME@_destroy. */
@NAME@_state* @NAME@_create(void);

/* Frees the state and everything it owns. NULL is allowed. */
void @NAME@_destroy(@NAME@_state* state);

/* Restores the build-time values and presence flags and zeroes the step counter. */
void @NAME@_reset(@NAME@_state* state);

/* One training step: forward, backward and optimizer update, as the Python step did.
@PARAM_DOC@ * Returns GRAPHC_OK, GRAPHC_EBATCH, GRAPHC_EINDEX, GRAPHC_ENOMEM (the scratch arena,
 * owned by the state, grows on demand), GRAPHC_EINVAL (a NULL state or argument) or
 * GRAPHC_ESTATE; on any error nothing in the state changed.
 */
@STEP_DECL@

/* Number of state tensors, and their static descriptions (i < @NAME@_num_tensors()). */
size_t @NAME@_num_tensors(void);
const @NAME@_tensor_info* @NAME@_tensor(size_t i);

/* Index of the tensor called name, or -1. */
int @NAME@_find(const char* name);

/* Copies tensor `name` into out, which holds n elements of its dtype; n must equal its numel
 * (else GRAPHC_EINVAL). An absent gradient reads as zeros, an absent optimizer state as the
 * value Python starts it from. */
int @NAME@_get_param(const @NAME@_state* state, const char* name, void* out, size_t n);

/* Overwrites tensor `name` from in (n elements of its dtype) and marks it present. */
int @NAME@_set_param(@NAME@_state* state, const char* name, const void* in, size_t n);

/* The state's own buffer of tensor `name` (NULL if unknown): read or write in place between
 * steps; owned by the state. */
void* @NAME@_param_data(@NAME@_state* state, const char* name);

/* 1 if tensor `name` is present, 0 if absent, -1 if unknown. Parameters are always present. */
int @NAME@_is_present(const @NAME@_state* state, const char* name);

/* Marks a gradient / optimizer state present (1) or absent (0), e.g. zero_grad(set_to_none).
 * Parameters and buffers cannot be made absent (GRAPHC_EINVAL). */
int @NAME@_set_present(@NAME@_state* state, const char* name, int present);

/* Number of successful steps since create/reset (saved in checkpoints). */
int64_t @NAME@_steps(const @NAME@_state* state);

/* After GRAPHC_EINDEX: info = {error code, node index, flat position, bad value}.
 * After GRAPHC_ENONFINITE: info = {error code, k, 0, 0}: the k-th checked tensor
 * (@NAME@_checked(k) names it) was the first, in execution order, holding NaN or Inf. */
void @NAME@_last_error(const @NAME@_state* state, int64_t info[@ERR_WORDS@]);

/* The name of the k-th tensor a check_finite step checks (NULL when k is out of range). */
const char* @NAME@_checked(int64_t k);

/* Seeds the random stream of random ops (dropout) in this state (SplitMix64; not the same
 * stream as Python's). Steps without random ops ignore it. */
void @NAME@_set_seed(@NAME@_state* state, uint64_t seed);

/* Writes a checkpoint gc.load() reads (an uncompressed .npz; the format is described in
 * graphc/aot/checkpoint.py): every present tensor, the step count and the last
 * hyperparameters. Atomic: written to a temporary file in the same directory, fsync'ed, then
 * renamed over path. GRAPHC_EIO on failure (errno is kept). */
int @NAME@_save(const @NAME@_state* state, const char* path);

/* Reads a checkpoint written by @NAME@_save (or graphc.aot.save_state). Every parameter and
 * buffer must be in it with its dtype and shape; gradients / optimizer states not in it become
 * absent. All or nothing: on GRAPHC_EIO / GRAPHC_EFORMAT / GRAPHC_ENOMEM the state is unchanged. */
int @NAME@_load(@NAME@_state* state, const char* path);

/* A static English description of a return code. */
const char* @NAME@_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* @NAME_UPPER@_H_INCLUDED */
