/* The same two graphs in StarPU, with empty codelets, timed the same way:
 *   chain: n tasks on one data handle in STARPU_RW mode (StarPU's implicit
 *          dependencies order them);
 *   fan:   n tasks each writing its own handle, then one task depending on
 *          all of them (starpu_task_declare_deps_array).
 * Prints "chain <seconds>" and "fan <seconds>" for each repetition.
 *
 *   starpu_overhead N REPEATS */
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void empty(void* buffers[], void* arg) {
  (void)buffers;
  (void)arg;
}

static struct starpu_codelet cl_rw = {.cpu_funcs = {empty}, .nbuffers = 1, .modes = {STARPU_RW}};
static struct starpu_codelet cl_w = {.cpu_funcs = {empty}, .nbuffers = 1, .modes = {STARPU_W}};
static struct starpu_codelet cl_none = {.cpu_funcs = {empty}, .nbuffers = 0};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  int reps = argc > 2 ? atoi(argv[2]) : 3;
  if (starpu_init(NULL) != 0) {
    fprintf(stderr, "starpu_init failed\n");
    return 1;
  }
  float x = 0;
  starpu_data_handle_t hx;
  starpu_variable_data_register(&hx, STARPU_MAIN_RAM, (uintptr_t)&x, sizeof x);
  float* y = calloc(n, sizeof(float));
  starpu_data_handle_t* hy = malloc(n * sizeof *hy);
  for (long i = 0; i < n; i++) starpu_variable_data_register(&hy[i], STARPU_MAIN_RAM, (uintptr_t)&y[i], sizeof(float));
  struct starpu_task** fan = malloc(n * sizeof *fan);
  for (int r = 0; r < reps + 1; r++) {  /* the first repetition warms up */
    double t0 = now();
    for (long i = 0; i < n; i++)
      if (starpu_task_insert(&cl_rw, STARPU_RW, hx, 0) != 0) return 1;
    starpu_task_wait_for_all();
    double t1 = now();
    /* Creating the tasks is timed too: the other runtime builds its tasks
     * inside the timed region. */
    double t2 = now();
    for (long i = 0; i < n; i++) {
      struct starpu_task* t = starpu_task_create();
      t->cl = &cl_w;
      t->handles[0] = hy[i];
      t->detach = 1;
      t->destroy = 0;
      fan[i] = t;
    }
    struct starpu_task* sink = starpu_task_create();
    sink->cl = &cl_none;
    starpu_task_declare_deps_array(sink, n, fan);
    for (long i = 0; i < n; i++)
      if (starpu_task_submit(fan[i]) != 0) return 1;
    if (starpu_task_submit(sink) != 0) return 1;
    starpu_task_wait_for_all();
    double t3 = now();
    for (long i = 0; i < n; i++) starpu_task_destroy(fan[i]);
    if (r > 0) printf("chain %.6f\nfan %.6f\n", t1 - t0, t3 - t2);
  }
  for (long i = 0; i < n; i++) starpu_data_unregister(hy[i]);
  starpu_data_unregister(hx);
  starpu_shutdown();
  free(fan);
  free(hy);
  free(y);
  return 0;
}
