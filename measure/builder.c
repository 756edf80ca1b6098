/* builder.c — the build thread pool: a FIFO of build jobs served by one
 * thread per core (one pool may serve every search of a daemon), tickets to
 * wait on or withdraw, and a watchdog that abandons a build still running
 * a while after its timeout and replaces its thread.  Every compiler runs
 * in a child process that the thread kills at the timeout itself: cc, and
 * NVRTC and clBuildProgram in the thread's own build process (build_client.c),
 * started at its first CUDA or OpenCL build and kept for the next.
 *
 * Lifetimes: a job is shared by the table of submitted jobs (until waited)
 * and by the thread running it; the pool's core is shared by the owner and
 * every thread, so a thread still stuck in a compiler after ms_builder_free
 * finds valid memory when it comes back, and frees the core if it is last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_internal.h"
#include "tuned_config.h"

/* Builds kill their compiler at the timeout; the watchdog only steps in
 * this much later, should that fail. */
#define KILL_WATCHDOG_GRACE_S 10.0

/* CLOCK_REALTIME `secs` from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(double secs) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)secs;
  ts.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  return ts;
}

typedef struct pool_thread {
  pthread_t th;
  struct pool_thread *next_ended; /* on the core's list of ended threads to join */
  bool retired; /* its build was abandoned: exit after the current job */
  int index;    /* names its build process's log */
  ms_build_proc_t *proc; /* its build process, made at the first CUDA or OpenCL build */
} pool_thread_t;

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state_t;

typedef struct job {
  int64_t ticket;
  int refs;
  job_state_t state;
  bool abandoned;
  ms_candidate_t *cand; /* the job's own copy: the caller may free theirs after an abandon */
  ms_result_t *dest;
  ms_result_t local;    /* the thread builds into this, then moves it to dest */
  double started, deadline;
  pool_thread_t *thread;
  struct job *next_queued, *next_all;
} job_t;

typedef struct core {
  pthread_mutex_t mu;
  pthread_cond_t work, done, wd;
  int refs;        /* owner + every live thread */
  int nactive;     /* pool threads not retired */
  int nstarted;    /* pool threads ever started */
  bool shutdown, wd_stop;
  job_t *queue_head, *queue_tail, *all;
  pool_thread_t *ended; /* threads that ended, for ms_builder_free to join */
  bool freed;           /* ms_builder_free returned: a thread ending later detaches itself */
  int64_t next_ticket;
  double timeout_s;
  char run_dir[MS_DIR_MAX];
  bool own_dir;
} core_t;

struct ms_builder {
  core_t *core;
  pthread_t watchdog;
};

static void core_unref_locked(core_t *c) {
  if (--c->refs > 0) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->work);
  pthread_cond_destroy(&c->done);
  pthread_cond_destroy(&c->wd);
  free(c);
}

static void job_unref(job_t *j) {
  if (--j->refs > 0) return;
  ms_candidate_free(j->cand);
  ms_result_clear(&j->local);
  free(j);
}

/* cc builds can be paused (ms_commands_pause): their deadlines are on the
 * clock that stands still meanwhile. */
static bool host_compiled(const job_t *j) {
  return j->cand->target.kind == TN_TARGET_CPU || j->cand->target.kind == TN_TARGET_CUDA_HOST;
}

static double job_clock(const job_t *j) { return host_compiled(j) ? ms_active_clock() : tn_now(); }

/* CUDA and OpenCL: NVRTC or clBuildProgram in the thread's build process
 * (none without CUDA in this build: the compile then says so).  A build
 * process killed by a SIGKILL we did not send (the OOM killer, a user) is
 * not the candidate's fault by itself: the build runs once more in a fresh
 * process, and only a second such death is recorded against it. */
static void build_in_proc(core_t *c, pool_thread_t *me, const job_t *j, const char *dir, ms_result_t *r) {
  tn_err_t err = {0};
  char log[MS_PATH_MAX];
  snprintf(log, sizeof log, "%s/build-%d.log", c->run_dir, me->index);
  bool cuda = j->cand->target.kind == TN_TARGET_CUDA;
  bool needed = cuda ? TUNED_HAVE_CUDA : TUNED_HAVE_OPENCL;
  if (needed && !me->proc && ms_build_proc_new(NULL, log, &me->proc, &err) < 0) {
    ms_result_fail(r, MS_BUILD_ERROR, "%s", err.msg);
    return;
  }
  for (int life = 0; life < 2; life++) {
    if (cuda) ms_build_cuda(j->cand, dir, me->proc, c->timeout_s, r);
    else ms_build_opencl(j->cand, dir, me->proc, c->timeout_s, r);
    if (life == 1 || !ms_build_proc_killed(me->proc)) break;
    ms_result_clear(r);
  }
}

/* Runs one build into j->local (no lock held). */
static void run_job(core_t *c, pool_thread_t *me, job_t *j) {
  char dir[MS_PATH_MAX];
  ms_result_t *r = &j->local;
  ms_result_init(r);
  snprintf(dir, sizeof dir, "%s/b%06lld", c->run_dir, (long long)j->ticket);
  tn_err_t err = {0};
  double t0 = job_clock(j);
  if (ms_mkdirs(dir, &err) < 0) {
    ms_result_fail(r, MS_BUILD_ERROR, "%s", err.msg);
  } else if (j->cand->target.kind == TN_TARGET_CUDA || j->cand->target.kind == TN_TARGET_OPENCL) {
    build_in_proc(c, me, j, dir, r);
  } else if (j->cand->target.kind == TN_TARGET_CUDA_HOST) {
    ms_build_cuda_host(j->cand, dir, c->timeout_s, r);
  } else {
    ms_build_c(j->cand, dir, c->timeout_s, r);
  }
  r->build.build_secs = job_clock(j) - t0; /* without paused time */
  if (!r->artifact[0]) ms_remove_tree(dir); /* the log is in the error; a shared pool's dir lives long */
}

static void *thread_main(void *arg);

/* Starts one more pool thread (lock held). */
static void spawn_thread_locked(core_t *c) {
  pool_thread_t *t = tn_xcalloc(1, sizeof *t);
  void **args = tn_xmalloc(2 * sizeof *args);
  args[0] = c, args[1] = t;
  t->index = c->nstarted++;
  if (pthread_create(&t->th, NULL, thread_main, args) == 0) {
    c->refs++;
    c->nactive++;
  } else {
    free(args);
    free(t);
  }
}

static void *thread_main(void *arg) {
  void **args = arg;
  core_t *c = args[0];
  pool_thread_t *me = args[1];
  free(args);
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->shutdown && !c->queue_head) pthread_cond_wait(&c->work, &c->mu);
    job_t *j = c->queue_head;
    if (!j) break; /* shut down and drained */
    c->queue_head = j->next_queued;
    if (!c->queue_head) c->queue_tail = NULL;
    j->state = JOB_RUNNING;
    j->thread = me;
    j->refs++;
    j->started = job_clock(j);
    j->deadline = j->started + c->timeout_s + KILL_WATCHDOG_GRACE_S;
    pthread_cond_signal(&c->wd);
    pthread_mutex_unlock(&c->mu);
    run_job(c, me, j);
    pthread_mutex_lock(&c->mu);
    if (!j->abandoned) {
      *j->dest = j->local;
      ms_result_init(&j->local); /* ownership of run_secs moved */
      j->state = JOB_DONE;
      pthread_cond_broadcast(&c->done);
    } else if (j->local.artifact[0]) { /* nobody will run it: its directory goes */
      char dir[MS_PATH_MAX];
      snprintf(dir, sizeof dir, "%s/b%06lld", c->run_dir, (long long)j->ticket);
      ms_remove_tree(dir);
    }
    job_unref(j);
    if (me->retired) break;
  }
  /* Before counting this thread out: ms_builder_free returns with no build
   * process of the pool left. */
  pthread_mutex_unlock(&c->mu);
  ms_build_proc_free(me->proc); /* it exits at once: it is idle */
  pthread_mutex_lock(&c->mu);
  if (!me->retired) c->nactive--;
  if (c->freed) { /* stuck past ms_builder_free's wait: nobody joins it */
    pthread_detach(me->th);
    free(me);
  } else { /* ms_builder_free joins it, so that no thread of the pool outlives the pool */
    me->next_ended = c->ended;
    c->ended = me;
  }
  pthread_cond_broadcast(&c->done);
  core_unref_locked(c);
  return NULL;
}

/* Abandons a running job (lock held): at its deadline (timed_out), or
 * because its search stopped.  Its thread finishes the compile, discards
 * the result and exits; a new thread takes its place in the pool. */
static void abandon_locked(core_t *c, job_t *j, double now, bool timed_out) {
  j->abandoned = true;
  ms_result_init(j->dest);
  snprintf(j->dest->build.arch, sizeof j->dest->build.arch, "%s", j->cand->target.arch);
  j->dest->build.build_secs = now - j->started;
  if (timed_out)
    ms_result_fail(j->dest, MS_TIMEOUT,
                   "build timed out after %.1f s (the %s compiler was not stopped at its time limit: the build was "
                   "abandoned and its thread replaced)",
                   now - j->started, tn_target_kind_name(j->cand->target.kind));
  else
    ms_result_fail(j->dest, MS_BUILD_ERROR, "build abandoned after %.1f s: its search stopped", now - j->started);
  j->state = JOB_DONE;
  j->thread->retired = true;
  c->nactive--;
  spawn_thread_locked(c);
  pthread_cond_broadcast(&c->done);
}

static void *watchdog_main(void *arg) {
  core_t *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->wd_stop) {
    double now = tn_now(), next = now + 1.0;
    for (job_t *j = c->all; j; j = j->next_all) {
      if (j->state != JOB_RUNNING || j->abandoned) continue;
      double jnow = job_clock(j);
      if (j->deadline <= jnow) abandon_locked(c, j, jnow, true);
      else if (j->deadline - jnow + now < next) next = j->deadline - jnow + now;
    }
    struct timespec ts = deadline_in(next - now + 0.001);
    pthread_cond_timedwait(&c->wd, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int ms_builder_new(const ms_build_opts_t *o, ms_builder_t **out, tn_err_t *err) {
  ms_build_opts_t def = {0};
  if (!o) o = &def;
  *out = NULL;
  if (o->timeout_s < 0 || o->nthreads < 0)
    return tn_err_set(err, TN_EINVAL, "builder: timeout and thread count must not be negative");
  core_t *c = tn_xcalloc(1, sizeof *c);
  if (o->run_dir) {
    if (strlen(o->run_dir) >= sizeof c->run_dir) {
      free(c);
      return tn_err_set(err, TN_EINVAL, "builder: run directory path longer than %d bytes", MS_DIR_MAX - 1);
    }
    snprintf(c->run_dir, sizeof c->run_dir, "%s", o->run_dir);
    if (ms_mkdirs(c->run_dir, err) < 0) {
      free(c);
      return err ? err->code : TN_EIO;
    }
  } else if (ms_temp_dir_new("tuned-build", c->run_dir, sizeof c->run_dir, err) < 0) {
    free(c);
    return err ? err->code : TN_EIO;
  } else {
    c->own_dir = true;
  }
  /* Before any thread of ours exists: setenv races with posix_spawn. */
  char cache[MS_PATH_MAX];
  snprintf(cache, sizeof cache, "%s/pocl-cache", c->run_dir);
  ms_pocl_cache_init(cache);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->work, NULL);
  pthread_cond_init(&c->done, NULL);
  pthread_cond_init(&c->wd, NULL);
  c->refs = 1;
  c->timeout_s = o->timeout_s > 0 ? o->timeout_s : 30.0;
  int n = o->nthreads > 0 ? o->nthreads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  ms_builder_t *b = tn_xcalloc(1, sizeof *b);
  b->core = c;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < TN_MAX(n, 1); i++) spawn_thread_locked(c);
  bool ok = c->nactive > 0;
  pthread_mutex_unlock(&c->mu);
  if (!ok || pthread_create(&b->watchdog, NULL, watchdog_main, c) != 0) {
    /* Unlikely: threads cannot be created.  Let the started ones exit. */
    pthread_mutex_lock(&c->mu);
    c->shutdown = true;
    pthread_cond_broadcast(&c->work);
    core_unref_locked(c);
    free(b);
    return tn_err_set(err, TN_EIO, "builder: cannot start threads");
  }
  *out = b;
  return TN_OK;
}

const char *ms_builder_run_dir(const ms_builder_t *b) { return b->core->run_dir; }

void ms_builder_free(ms_builder_t *b) {
  if (!b) return;
  core_t *c = b->core;
  pthread_mutex_lock(&c->mu);
  c->shutdown = true;
  pthread_cond_broadcast(&c->work);
  while (c->nactive > 0) pthread_cond_wait(&c->done, &c->mu);
  /* Threads retired with an abandoned build end when its compiler does,
   * which is killed at the build timeout: wait for them too. */
  struct timespec ts = deadline_in(c->timeout_s + KILL_WATCHDOG_GRACE_S);
  while (c->refs > 1 && pthread_cond_timedwait(&c->done, &c->mu, &ts) == 0) {
  }
  pool_thread_t *ended = c->ended;
  c->ended = NULL;
  c->freed = true;
  c->wd_stop = true;
  pthread_cond_signal(&c->wd);
  pthread_mutex_unlock(&c->mu);
  pthread_join(b->watchdog, NULL);
  while (ended) { /* exited (or about to): at process exit none is still running */
    pool_thread_t *next = ended->next_ended;
    pthread_join(ended->th, NULL);
    free(ended);
    ended = next;
  }
  pthread_mutex_lock(&c->mu);
  for (job_t *j = c->all, *next; j; j = next) {
    next = j->next_all;
    job_unref(j);
  }
  c->all = NULL;
  /* A thread still stuck in a compiler may write into its job's directory
   * later; those writes fail harmlessly and their result is discarded. */
  if (c->own_dir) ms_temp_dir_remove(c->run_dir);
  core_unref_locked(c);
  free(b);
}

int64_t ms_build_submit(ms_builder_t *b, const ms_candidate_t *cand, ms_result_t *res) {
  if (!b || !cand || !res) return TN_EINVAL;
  core_t *c = b->core;
  job_t *j = tn_xcalloc(1, sizeof *j);
  tn_err_t err = {0};
  if (ms_candidate_new(&cand->target, cand->source, cand->kernels, cand->nkernels, cand->params,
                       cand->nparams, &j->cand, &err) < 0) {
    free(j);
    return err.code;
  }
  j->cand->min_sm = cand->min_sm;
  j->cand->sm90a = cand->sm90a;
  j->dest = res;
  j->refs = 1; /* the table's */
  ms_result_init(&j->local);
  pthread_mutex_lock(&c->mu);
  j->ticket = c->next_ticket++;
  j->next_all = c->all;
  c->all = j;
  if (c->queue_tail) c->queue_tail->next_queued = j;
  else c->queue_head = j;
  c->queue_tail = j;
  pthread_cond_signal(&c->work);
  pthread_mutex_unlock(&c->mu);
  return j->ticket;
}

/* Finds a job by ticket (lock held); *link points at its list link. */
static job_t *find_locked(core_t *c, int64_t ticket, job_t ***link) {
  for (job_t **p = &c->all; *p; p = &(*p)->next_all)
    if ((*p)->ticket == ticket) {
      if (link) *link = p;
      return *p;
    }
  return NULL;
}

void ms_build_wait(ms_builder_t *b, int64_t ticket) {
  core_t *c = b->core;
  pthread_mutex_lock(&c->mu);
  job_t **link = NULL, *j;
  while ((j = find_locked(c, ticket, &link)) && j->state != JOB_DONE) pthread_cond_wait(&c->done, &c->mu);
  if (j) {
    *link = j->next_all;
    job_unref(j);
  }
  pthread_mutex_unlock(&c->mu);
}

bool ms_build_wait_for(ms_builder_t *b, int64_t ticket, double max_s) {
  core_t *c = b->core;
  struct timespec ts = deadline_in(max_s);
  pthread_mutex_lock(&c->mu);
  job_t *j;
  while ((j = find_locked(c, ticket, NULL)) && j->state != JOB_DONE)
    if (pthread_cond_timedwait(&c->done, &c->mu, &ts) != 0) break;
  bool done = !j || j->state == JOB_DONE;
  pthread_mutex_unlock(&c->mu);
  return done;
}

bool ms_build_done(ms_builder_t *b, int64_t ticket) {
  core_t *c = b->core;
  pthread_mutex_lock(&c->mu);
  job_t *j = find_locked(c, ticket, NULL);
  bool done = !j || j->state == JOB_DONE;
  pthread_mutex_unlock(&c->mu);
  return done;
}

void ms_build_abandon(ms_builder_t *b, int64_t ticket) {
  core_t *c = b->core;
  pthread_mutex_lock(&c->mu);
  job_t *j = find_locked(c, ticket, NULL);
  bool running = j && j->state == JOB_RUNNING && !j->abandoned;
  if (running) abandon_locked(c, j, job_clock(j), false);
  pthread_mutex_unlock(&c->mu);
  if (!running) ms_build_cancel(b, ticket);
}

void ms_build_cancel(ms_builder_t *b, int64_t ticket) {
  core_t *c = b->core;
  pthread_mutex_lock(&c->mu);
  job_t *j = find_locked(c, ticket, NULL);
  if (j && j->state == JOB_QUEUED) {
    job_t **p = &c->queue_head, *prev = NULL;
    while (*p != j) prev = *p, p = &(*p)->next_queued;
    *p = j->next_queued;
    if (c->queue_tail == j) c->queue_tail = prev;
    ms_result_init(j->dest);
    ms_result_fail(j->dest, MS_BUILD_ERROR, "build cancelled before it started");
    j->state = JOB_DONE;
    pthread_cond_broadcast(&c->done);
  }
  pthread_mutex_unlock(&c->mu);
}

int ms_build_batch(ms_builder_t *b, ms_candidate_t *const *cands, int n, ms_result_t *results,
                   tn_err_t *err) {
  if (!b || n < 0 || (n > 0 && (!cands || !results)))
    return tn_err_set(err, TN_EINVAL, "ms_build_batch: needs a builder, candidates and results");
  int64_t *tickets = tn_xmalloc(sizeof *tickets * (size_t)TN_MAX(n, 1));
  for (int i = 0; i < n; i++) {
    ms_result_init(&results[i]);
    tickets[i] = ms_build_submit(b, cands[i], &results[i]);
    if (tickets[i] < 0) ms_result_fail(&results[i], MS_BUILD_ERROR, "invalid candidate");
  }
  for (int i = 0; i < n; i++)
    if (tickets[i] >= 0) ms_build_wait(b, tickets[i]);
  free(tickets);
  return TN_OK;
}
