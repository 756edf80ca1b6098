/* device.c — one measurer per device: the process's registry of devices,
 * each a first-come-first-served lock that a runner holds while one of its
 * candidates runs, so that no two candidates are timed at once on a device
 * whichever job, thread or worker process they belong to.
 *
 * The registry is process-wide on purpose: a device is a resource of the
 * machine, not of a search, and every runner of the process must see the
 * same lock (the daemon's jobs each run their own search).  Devices are
 * never freed; there are a handful. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ms_internal.h"

/* How often a waiter asks its stop callback. */
#define POLL_NS 10000000L

/* A thread waiting for a device, on its stack until it holds it. */
typedef struct waiter {
  struct waiter *next;
} waiter_t;

struct ms_device {
  char name[MS_DEVICE_NAME_MAX];
  bool host; /* the host CPU: compilers pause while it is held */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool held;
  waiter_t *head, *tail; /* waiting, first come first */
  struct ms_device *next;
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static ms_device_t *devices;

void ms_device_name(const tn_target_t *t, char *buf, size_t size) {
  if (t->kind == TN_TARGET_CUDA) snprintf(buf, size, "cuda:0");
  else if (t->kind == TN_TARGET_OPENCL && !ms_opencl_device_is_cpu()) snprintf(buf, size, "opencl:0");
  else snprintf(buf, size, "cpu"); /* cpu, cuda-host and PoCL run on the host's cores */
}

ms_device_t *ms_device_get(const char *name) {
  pthread_mutex_lock(&registry_mu);
  ms_device_t *d = devices;
  while (d && strncmp(d->name, name, sizeof d->name - 1) != 0) d = d->next;
  if (!d) {
    d = tn_xcalloc(1, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->host = strcmp(d->name, "cpu") == 0;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    d->next = devices;
    devices = d;
  }
  pthread_mutex_unlock(&registry_mu);
  return d;
}

/* Takes w out of d's queue (lock held) and wakes the others: the one
 * behind it may be first now. */
static void leave_locked(ms_device_t *d, waiter_t *w) {
  waiter_t **p = &d->head, *prev = NULL;
  while (*p && *p != w) prev = *p, p = &(*p)->next;
  if (!*p) return;
  *p = w->next;
  if (d->tail == w) d->tail = prev;
  pthread_cond_broadcast(&d->cv);
}

bool ms_device_acquire(ms_device_t *d, bool (*stop)(void *ctx), void *ctx) {
  waiter_t w = {0};
  pthread_mutex_lock(&d->mu);
  if (d->tail) d->tail->next = &w;
  else d->head = &w;
  d->tail = &w;
  while (d->held || d->head != &w) {
    if (!stop) {
      pthread_cond_wait(&d->cv, &d->mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += POLL_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    if (!d->held && d->head == &w) break;
    /* The callback may take locks of its own (a search queues builds). */
    pthread_mutex_unlock(&d->mu);
    bool give_up = stop(ctx);
    pthread_mutex_lock(&d->mu);
    if (give_up) {
      leave_locked(d, &w);
      pthread_mutex_unlock(&d->mu);
      return false;
    }
  }
  leave_locked(d, &w);
  d->held = true;
  pthread_mutex_unlock(&d->mu);
  if (d->host) ms_commands_pause(true);
  return true;
}

void ms_device_release(ms_device_t *d) {
  if (d->host) ms_commands_pause(false);
  pthread_mutex_lock(&d->mu);
  d->held = false;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}
