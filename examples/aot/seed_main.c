/* seed_main.c: the seed example (linear regression, 200 epochs) trained from C.
 *
 * Uses two ahead-of-time libraries built by build_seed.py: seed_train (forward, L1 loss,
 * backward, SGD) and seed_test (the inference-mode loss). After each training step the
 * parameters are copied into the test step's state by name, as the Python example shares one
 * model between its two compiled steps. Prints the same lines as examples/seed_linreg.py.
 *
 * Usage: seed_main [DATA_DIR]   (DATA_DIR holds seed_{X,y}_{train,test}.npy; default ".")
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "seed_test.h"
#include "seed_train.h"

static float* load(const char* dir, const char* name, int64_t* rows) {
    char path[4096];
    int64_t shape[NPY_MAX_DIMS];
    int ndim = 0;
    float* a;
    snprintf(path, sizeof path, "%s/seed_%s.npy", dir, name);
    a = (float*)npy_load(path, "<f4", shape, &ndim);
    if (a && (ndim != 2 || shape[1] != 1)) {
        fprintf(stderr, "%s: expected shape (N, 1)\n", path);
        free(a);
        return NULL;
    }
    if (a) *rows = shape[0];
    return a;
}

/* Copy every tensor the test step reads from the training state (same names). */
static int sync_params(seed_train_state* tr, seed_test_state* te) {
    size_t i;
    for (i = 0; i < seed_test_num_tensors(); i++) {
        const seed_test_tensor_info* t = seed_test_tensor(i);
        const void* src = seed_train_param_data(tr, t->name);
        if (!src || seed_test_set_param(te, t->name, src, t->numel) != GRAPHC_OK) {
            fprintf(stderr, "cannot copy %s into the test step\n", t->name);
            return -1;
        }
    }
    return 0;
}

static void print_params(const char* what, seed_train_state* tr) {
    float w, b;
    seed_train_get_param(tr, "model.linear_layer.weight", &w, 1);
    seed_train_get_param(tr, "model.linear_layer.bias", &b, 1);
    printf("%s: linear_layer.weight = %.8f, linear_layer.bias = %.8f\n", what, w, b);
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : ".";
    int64_t n_train = 0, n_test = 0, n;
    float *X_train = load(dir, "X_train", &n_train), *y_train = load(dir, "y_train", &n);
    float *X_test = load(dir, "X_test", &n_test), *y_test = load(dir, "y_test", &n);
    seed_train_state* tr = seed_train_create();
    seed_test_state* te = seed_test_create();
    int epoch, rc = 0;
    if (!X_train || !y_train || !X_test || !y_test || !tr || !te) return 1;
    print_params("initial parameters", tr);
    for (epoch = 0; epoch < 200; epoch++) {
        float loss, test_loss;
        rc = seed_train_step(tr, X_train, y_train, n_train, NULL, &loss);
        if (rc == GRAPHC_OK) rc = sync_params(tr, te) ? GRAPHC_EINVAL : GRAPHC_OK;
        if (rc == GRAPHC_OK) rc = seed_test_step(te, X_test, y_test, n_test, NULL, &test_loss);
        if (rc != GRAPHC_OK) {
            fprintf(stderr, "epoch %d: %s\n", epoch, seed_train_strerror(rc));
            break;
        }
        if (epoch % 10 == 0)
            printf("Epoch: %d | Train Loss: %.6f | Test Loss: %.6f\n", epoch, loss, test_loss);
    }
    print_params("learned parameters", tr);
    seed_train_destroy(tr);
    seed_test_destroy(te);
    free(X_train); free(y_train); free(X_test); free(y_test);
    return rc == GRAPHC_OK ? 0 : 1;
}
