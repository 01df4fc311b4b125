//@ graphc_aot.h: the definitions every graphc AOT library shares: return codes (GRAPHC_E*,
//@ the one definition of them), element types and tensor kinds. Copied into each NAME.h
//@ (step.h's @GRAPHC_AOT_H@), behind one include guard, so several libraries' headers can be
//@ included together. The kernel's own error words (codegen/abi.py ERR_*) are mapped onto
//@ these codes in wrapper.c's NAME_step.
#ifndef GRAPHC_AOT_COMMON
#define GRAPHC_AOT_COMMON
/* return codes (shared by every graphc AOT library) */
#define GRAPHC_OK 0
#define GRAPHC_EBATCH 1   /* a batch size < 1 or > GRAPHC_MAX_BATCH */
#define GRAPHC_EINDEX 2   /* a class index / target out of range; see NAME_last_error */
#define GRAPHC_ENOMEM 3   /* an allocation failed */
#define GRAPHC_EINVAL 4   /* NULL pointer, unknown tensor name or wrong element count */
#define GRAPHC_ESTATE 5   /* gradient presence differs from the one the step was built for */
#define GRAPHC_EIO 6      /* a file could not be read or written (errno says why) */
#define GRAPHC_EFORMAT 7  /* a checkpoint that does not fit this step's state */
#define GRAPHC_EINTERNAL 8 /* a failure the step does not expect (please report it) */
#define GRAPHC_ENONFINITE 9 /* check_finite: the loss or a gradient holds NaN or Inf; the
                            * update was not applied; see NAME_last_error and NAME_checked */
#define GRAPHC_EBOUNDS 10   /* debug builds: a load or store outside its buffer was stopped */
#define GRAPHC_MAX_BATCH ((int64_t)2147483647)
/* element types (the numpy names) */
#define GRAPHC_FLOAT32 0  /* float */
#define GRAPHC_FLOAT64 1  /* double */
#define GRAPHC_INT64 2    /* int64_t */
#define GRAPHC_INT32 3    /* int32_t */
#define GRAPHC_BOOL 4     /* uint8_t, 0 or 1 */
/* tensor kinds */
#define GRAPHC_PARAM 0
#define GRAPHC_BUFFER 1
#define GRAPHC_GRAD 2
#define GRAPHC_OPTIM 3
#endif
