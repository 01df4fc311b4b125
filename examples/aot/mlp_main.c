/* mlp_main.c: train the ahead-of-time compiled mlp_small step (784-256-ReLU-10) from C.
 *
 * Reads the inputs (float32, N x 784) and class targets (int64, N) from .npy files, runs
 * EPOCHS passes over them in order in minibatches of BATCH rows (the last, partial batch is
 * kept, as PyTorch's DataLoader does: the step takes any batch size), prints the mean loss of
 * each epoch, and optionally writes a checkpoint that Python's gc.load reads.
 *
 * Usage: mlp_main X.npy Y.npy [EPOCHS=5] [BATCH=64] [CHECKPOINT]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mlp.h"
#include "npy.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
    int64_t xs[NPY_MAX_DIMS], ys[NPY_MAX_DIMS], n, start;
    int xd = 0, yd = 0, epoch, epochs, rc = GRAPHC_OK;
    int64_t batch, steps = 0;
    float *X, loss;
    int64_t* Y;
    mlp_state* s;
    double t0, spent = 0.0;
    if (argc < 3) {
        fprintf(stderr, "usage: %s X.npy Y.npy [EPOCHS] [BATCH] [CHECKPOINT]\n", argv[0]);
        return 2;
    }
    epochs = argc > 3 ? atoi(argv[3]) : 5;
    batch = argc > 4 ? atoll(argv[4]) : 64;
    X = (float*)npy_load(argv[1], "<f4", xs, &xd);
    Y = (int64_t*)npy_load(argv[2], "<i8", ys, &yd);
    if (!X || !Y) return 1;
    if (xd != 2 || xs[1] != 784 || yd != 1 || ys[0] != xs[0]) {
        fprintf(stderr, "expected X of shape (N, 784) and Y of shape (N,)\n");
        return 1;
    }
    n = xs[0];
    s = mlp_create();
    if (!s) return 1;
    for (epoch = 0; epoch < epochs && rc == GRAPHC_OK; epoch++) {
        double total = 0.0;
        int nb = 0;
        for (start = 0; start < n; start += batch) {
            int64_t b = n - start < batch ? n - start : batch;
            t0 = now();
            rc = mlp_step(s, X + start * 784, Y + start, b, NULL, &loss);
            spent += now() - t0;
            if (rc != GRAPHC_OK) {
                int64_t info[4];
                mlp_last_error(s, info);
                fprintf(stderr, "step failed: %s (position %lld, value %lld)\n",
                        mlp_strerror(rc), (long long)info[2], (long long)info[3]);
                break;
            }
            total += loss;
            nb++;
            steps++;
        }
        if (rc == GRAPHC_OK) printf("epoch %d | loss %.6f\n", epoch, total / nb);
    }
    if (steps) fprintf(stderr, "%lld steps, %.1f us per step\n", (long long)steps,
                       1e6 * spent / (double)steps);
    if (rc == GRAPHC_OK && argc > 5) {
        rc = mlp_save(s, argv[5]);
        if (rc != GRAPHC_OK) fprintf(stderr, "%s: %s\n", argv[5], mlp_strerror(rc));
    }
    mlp_destroy(s);
    free(X);
    free(Y);
    return rc == GRAPHC_OK ? 0 : 1;
}
