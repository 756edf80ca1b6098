/* td.h — the daemon's internal interfaces: configuration, targets, the libuv
 * server and its connections, JSON-RPC requests and methods, the job manager,
 * logging and default paths.  Only daemon/ includes it.  Prefix: td_. */
#ifndef TUNED_TD_H
#define TUNED_TD_H

#include <cJSON.h>
#include <limits.h>
#include <stdatomic.h>
#include <uv.h>

#include "common/common.h"
#include "common/target.h"
#include "db/db.h"
#include "ir/ir.h"
#include "measure/measure.h"

/* Longest request line (bytes, without the '\n'); longer ones are answered
 * with -32600 and the connection is closed.  See docs/protocol.md. */
#define TUNED_MAX_MESSAGE (1u << 20)

/* JSON-RPC error codes (docs/protocol.md). */
enum {
  TD_E_PARSE = -32700,
  TD_E_REQUEST = -32600,
  TD_E_METHOD = -32601,
  TD_E_PARAMS = -32602,
  TD_E_INTERNAL = -32603,
  TD_E_NOT_FOUND = -32001,
  TD_E_WORKLOAD = -32002,
  TD_E_TARGET = -32003,
  TD_E_NO_KERNEL = -32004,
  TD_E_STOPPING = -32005,
};

/* ---- log.c: structured lines on stderr ------------------------------------ */

typedef enum td_log_level { TD_DEBUG, TD_INFO, TD_WARN, TD_ERROR } td_log_level_t;

/* Parses "debug", "info", "warn", "error"; -1 otherwise. */
int td_log_level_parse(const char *s);
void td_log_set_level(td_log_level_t lvl);
bool td_log_enabled(td_log_level_t lvl);
/* Writes `ts=... level=... msg="MSG" KV` where KV is the printf-formatted
 * rest ("job=3 target=cpu"); wrap free text in td_q() so it is quoted.
 * Thread-safe: one line is one write. */
void td_log(td_log_level_t lvl, const char *msg, const char *kvfmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The string quoted and escaped for a log value ("a \"b\""), in one of a few
 * per-thread rotating buffers: valid until the thread's 8th next call. */
const char *td_q(const char *s);

/* ---- paths.c: XDG defaults ------------------------------------------------ */

/* $XDG_RUNTIME_DIR/tuned/tuned.sock, else /tmp/tuned-$UID/tuned.sock; the
 * directory is created with mode 0700 and must belong to this user. */
int td_default_socket(char *buf, size_t size, tn_err_t *err);
/* $XDG_DATA_HOME/tuned/tuned.db, else ~/.local/share/tuned/tuned.db
 * (directories created, mode 0700). */
int td_default_db(char *buf, size_t size, tn_err_t *err);
/* The directory part of path ("." when none) into buf. */
void td_dirname(const char *path, char *buf, size_t size);

/* ---- targets.c: which targets this machine can measure for ---------------- */

typedef struct td_target_info {
  tn_target_t t;
  bool usable;
  char reason[2048]; /* why not, and what would work ("" when usable) */
} td_target_info_t;

typedef struct td_machine {
  ms_backend_status_t backends[MS_BACKEND__COUNT];
  char gpu_name[128];     /* CUDA device 0's name, "" when none */
  char gpu_target[64];    /* the nvidia/... target for that GPU, "" when unknown */
  const char *config_dir; /* the directory of target files (tn_config_dir or --configs) */
  const char *cc;         /* --cc: the compiler of cpu and cuda-host jobs instead of the target
                             files' "cc"; NULL: theirs */
} td_machine_t;

/* Probes the backends (once, at start-up). */
void td_machine_probe(td_machine_t *m, const char *config_dir);
/* The target by name with m->cc (if any) as its compiler. */
int td_target_lookup(const td_machine_t *m, const char *name, tn_target_t *t, tn_err_t *err);
/* Looks the target up and decides whether it is usable here.  Unknown names
 * fail (TN_EINVAL listing the known ones); a known but unusable target is
 * returned with usable = false and the reason. */
int td_target_check(const td_machine_t *m, const char *name, td_target_info_t *out, tn_err_t *err);
/* The name `--target auto` stands for, and why (for the log). */
void td_target_auto(const td_machine_t *m, char *name, size_t size, char *why, size_t whysize);
/* Every target file of the config directory, by name; files that do not
 * parse are left out with a warning in the log.  -1 when the directory
 * cannot be read (logged; the list is then empty). */
int td_target_list(const td_machine_t *m, td_target_info_t **out, int *n);

/* ---- server.c: the loop, the socket, the shutdown (connections: conn.c) -- */

typedef struct td_config {
  char target[64];
  char db_path[PATH_MAX];  /* a file, or a postgresql:// URL (never logged or shown as is: db_shown) */
  char db_shown[PATH_MAX]; /* db_path with a URL's password hidden */
  char name[256];          /* this daemon on a shared database: the owner of the jobs it runs */
  char socket_path[108];
  int max_jobs;
  double stop_timeout;     /* seconds a stop waits for running jobs before exiting anyway */
  double idle_timeout;     /* seconds without a request before a connection is closed (0: never) */
  int tune_nice;           /* nice levels the tuning work runs below the serving threads */
  double deadline_grace;   /* a job is stopped (failed) this long after its `seconds` budget */
  double lease_s;          /* a shared database's batch lease (renewed every lease_s / 3) */
  const char *config_dir;
} td_config_t;

typedef struct td_conn td_conn_t;
typedef struct td_req td_req_t;
typedef struct td_jobs td_jobs_t;
typedef struct td_readers td_readers_t;

typedef struct td_server {
  uv_loop_t *loop;
  td_config_t cfg;
  td_machine_t machine;
  td_target_info_t *targets; /* target.list, computed at start */
  int ntargets;
  uv_pipe_t listener;
  uv_signal_t sig_term, sig_int;
  uv_timer_t stop_timer;  /* armed by td_server_stop */
  uv_timer_t idle_timer;  /* closes idle connections (cfg.idle_timeout) */
  td_readers_t *readers;  /* the read path: threads with read-only connections (readers.c) */
  db_t *wdb;              /* thread-pool writes (submit, import, cancel), under wdb_lock; the
                             loop thread itself never calls SQLite once it runs */
  uv_mutex_t wdb_lock;
  td_jobs_t *jobs;
  td_conn_t *conns;       /* doubly linked */
  int nconns;
  uint64_t next_conn_id;
  int inflight_work;      /* thread-pool work and reads not yet done */
  bool listening;          /* the listener handle is initialised */
  bool stopping;
  bool closed;            /* handles closed, the loop is winding down */
  double started;         /* tn_now() at start */
  double started_unix;
  int lock_fd;            /* flock on DB.lock: one daemon per database */
  /* What the lower layers reach upward through, set by td_server_open: a
   * framed line goes to the JSON-RPC dispatch (td_rpc_line), a closed
   * connection to the job registry (td_jobs_conn_closed), and requests,
   * readers and jobs that finish, or server.shutdown, to the shutdown
   * (td_server_maybe_exit, td_server_stop).  Hooks rather than calls: no
   * file of the daemon calls back into a file that calls it. */
  void (*on_line)(td_conn_t *c, const char *line, size_t len);
  void (*on_conn_closed)(struct td_server *srv, td_conn_t *c);
  void (*on_settled)(struct td_server *srv);
  void (*on_stop)(struct td_server *srv, const char *why);
} td_server_t;

/* The owner this daemon gives its jobs and resumes them by: its name on a
 * shared (PostgreSQL) database, NULL (any) on its own SQLite file. */
static inline const char *td_job_owner(const td_server_t *srv) {
  return db_is_url(srv->cfg.db_path) ? srv->cfg.name : NULL;
}

/* Runs the daemon until it is stopped; returns the exit status. */
int td_server_run(const td_config_t *cfg, const td_machine_t *machine);
/* What td_server_run starts before its socket and signals: the database
 * (locked: one daemon per database; created and migrated), the job manager
 * and the reader threads, on srv->loop.  fuzz/fuzz_rpc.c drives a server
 * so opened without a socket.  td_server_release, once srv->loop has run
 * to its end, joins and closes what it opened. */
int td_server_open(td_server_t *srv, tn_err_t *err);
void td_server_release(td_server_t *srv);
/* sd_notify(3) of the printf-style state ("READY=1\nSTATUS=..."): the
 * systemd unit is Type=notify.  Nothing outside systemd or without
 * libsystemd (notify.c). */
void td_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Stops taking work, asks running jobs to stop, and exits once they have
 * (SIGTERM, SIGINT and server.shutdown end here). */
static inline void td_server_stop(td_server_t *srv, const char *why) { srv->on_stop(srv, why); }
/* Called whenever something the shutdown waits for has finished. */
static inline void td_server_maybe_exit(td_server_t *srv) { srv->on_settled(srv); }

struct td_conn {
  uv_pipe_t pipe;
  td_server_t *srv;
  uint64_t id;
  char *rbuf;          /* one read buffer (libuv has one read outstanding) */
  tn_buf_t in;         /* bytes read and not yet framed */
  size_t in_off;       /* start of the unprocessed part of `in` */
  size_t scan_off;     /* no '\n' before this offset (a long line is scanned once) */
  size_t wpending;     /* bytes queued for writing */
  int refs;            /* the handle + requests in flight */
  bool busy;           /* a request is being answered asynchronously */
  bool reading, eof, closing, closed, processing;
  int peer_pid;        /* the client process (SO_PEERCRED), 0 when unknown */
  double last_active;  /* tn_now() at accept and at every byte read */
  td_conn_t *prev, *next;
};

/* ---- conn.c: connections ---------------------------------------------------- */

/* The listener's connection callback: accepts, or refuses past the caps. */
void td_conn_accept(uv_stream_t *server, int status);
/* Queues one JSON line (a '\n' is appended) for the client.  Notifications
 * (`notification` true) to a client that stopped reading close the
 * connection once its queue passes TD_WRITE_HARD; responses are bounded by
 * the read backpressure instead. */
void td_conn_send(td_conn_t *c, const char *line, size_t len, bool notification);
void td_conn_ref(td_conn_t *c);
void td_conn_unref(td_conn_t *c);
/* Answered requests resume the connection's framing (it may have paused). */
void td_conn_process(td_conn_t *c);
/* Closes after the queued writes are flushed. */
void td_conn_close_graceful(td_conn_t *c);

/* ---- readers.c: the read path ---------------------------------------------- */

/* A query for a reader thread: work runs there with the thread's read-only
 * connection, then done runs on the loop.  Embed it in the caller's struct. */
typedef struct td_read td_read_t;
struct td_read {
  void (*work)(td_read_t *r, db_t *db);
  void (*done)(td_read_t *r);
  td_read_t *next;
};

/* Opens n read-only connections (errors at start, not at the first query)
 * and starts a thread for each. */
int td_readers_start(td_server_t *srv, int n, tn_err_t *err);
/* Closes the loop's handle (the shutdown, once no read is in flight). */
void td_readers_close(td_server_t *srv);
/* Joins the threads and closes the connections (after the loop ended). */
void td_readers_free(td_server_t *srv);
/* Queues r (counted in srv->inflight_work until done has run); -1 when the
 * daemon has closed and nothing runs any more. */
int td_read_queue(td_server_t *srv, td_read_t *r, void (*work)(td_read_t *, db_t *), void (*done)(td_read_t *));
/* A read-only connection for libuv thread-pool work that reads at length
 * (db.export, kernel.get): taken from a small spare list or opened; give it
 * back with td_rdb_release.  NULL with err set when it cannot be opened. */
db_t *td_rdb_acquire(td_server_t *srv, tn_err_t *err);
void td_rdb_release(td_server_t *srv, db_t *db);

/* ---- req.c: requests, params, errors, answers (rpc.c: the dispatch) ------- */

typedef enum td_reply { TD_REPLY, TD_PENDING } td_reply_t;
typedef void (*td_work_fn)(td_req_t *req);
typedef void (*td_read_fn)(td_req_t *req, db_t *db);

struct td_req {
  td_server_t *srv;
  td_conn_t *conn;      /* holds a reference; may be closing by the time we answer */
  cJSON *id;            /* NULL: a notification, no response */
  cJSON *params;        /* an object or NULL */
  const char *method;
  cJSON *result;        /* the answer, or */
  int code;             /* an error code (0: none) and */
  char *message;        /* its message (malloc'ed) */
  double t0;            /* when the line was framed */
  bool pending;         /* answered later: the connection waits (busy) */
  bool stop_after;      /* server.shutdown: stop once the answer is queued */
  /* thread-pool work (td_req_queue_work) and reads (td_req_queue_read) */
  uv_work_t work;
  td_read_t read;
  td_work_fn work_fn, done_fn;
  td_read_fn read_fn;
  bool requeued;        /* done_fn queued more work: not answered yet */
  char *line;           /* the response, rendered on a reader thread (or NULL) */
  void *data;
  void (*free_data)(void *);
};

/* Handles one framed line from c (answers, or leaves c busy). */
void td_rpc_line(td_conn_t *c, const char *line, size_t len);
/* Answers a request in the JSON-RPC 2.0 form and frees it. */
void td_req_finish(td_req_t *req);
/* Sets an error on req; returns TD_REPLY for `return td_req_error(...)`. */
td_reply_t td_req_error(td_req_t *req, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Maps a tn_err code to a JSON-RPC code (TN_EINVAL -> dflt, else internal). */
td_reply_t td_req_tn_error(td_req_t *req, int dflt, const tn_err_t *err);
/* Runs work(req) on libuv's thread pool, then done(req) (may be NULL) on the
 * loop, then answers (unless done queued more work or a read for req).
 * Returns TD_PENDING. */
td_reply_t td_req_queue_work(td_req_t *req, td_work_fn work, td_work_fn done);
/* The same on a reader thread with its read-only connection: every query a
 * method answers from the database goes this way, never on the loop.  Without
 * done, the response is also rendered there. */
td_reply_t td_req_queue_read(td_req_t *req, td_read_fn work, td_work_fn done);

/* Param accessors: 0 when fine (absent optional params give the default),
 * else -1 with req's error set to -32602 naming the param and the rule. */
int td_param_str(td_req_t *req, const char *name, bool required, size_t maxlen, const char **out);
int td_param_int(td_req_t *req, const char *name, bool required, int64_t dflt, int64_t min,
                 int64_t max, int64_t *out);
int td_param_num(td_req_t *req, const char *name, double dflt, double min, double max, double *out);
int td_param_bool(td_req_t *req, const char *name, bool dflt, bool *out);
int td_param_enum(td_req_t *req, const char *name, const char *const *values, int dflt, int *out);
/* A workload hash, or a prefix of one (TN_ID_SHOWN to TN_ID_HEX lower-case
 * hex digits, as tables show them): resolve a prefix with td_hash_resolve. */
int td_param_hash(td_req_t *req, const char *name, bool required, char out[TN_ID_SIZE]);
/* On a worker with a connection: a prefix taken by td_param_hash becomes the
 * whole hash of the one workload that has it (unchanged when none has it, so
 * that the lookups after it find nothing, as for an unknown whole hash; ""
 * stays "").  Two workloads with the prefix answer req with an error (-1). */
int td_hash_resolve(td_req_t *req, db_t *db, char hash[TN_ID_SIZE]);
/* A target name: absent -> the daemon's; must be known (else -32602) and,
 * with need_usable, one this machine can measure for (else -32003 with the
 * reason).  Queries accept any known target: records may come from another
 * machine (db.import). */
int td_param_target(td_req_t *req, const char *name, bool need_usable, td_target_info_t *out);
/* The same, with "+tf32" appended to the name (given or the daemon's) when
 * `tf32` and it is not there yet: TF32 tensor cores allowed. */
int td_param_target_tf32(td_req_t *req, const char *name, bool need_usable, bool tf32, td_target_info_t *out);
/* Workload parameter overrides {"M": 64}: names and integer values. */
int td_param_overrides(td_req_t *req, const char *name, cJSON **out);

/* ---- methods_*.c ---------------------------------------------------------- */

typedef td_reply_t (*td_method_fn)(td_req_t *req);

td_reply_t td_m_server_info(td_req_t *req);
td_reply_t td_m_target_list(td_req_t *req);
td_reply_t td_m_server_shutdown(td_req_t *req);
td_reply_t td_m_tune_submit(td_req_t *req);
td_reply_t td_m_tune_status(td_req_t *req);
td_reply_t td_m_tune_list(td_req_t *req);
td_reply_t td_m_tune_cancel(td_req_t *req);
td_reply_t td_m_tune_watch(td_req_t *req);
td_reply_t td_m_tune_trials(td_req_t *req);
td_reply_t td_m_db_workloads(td_req_t *req);
td_reply_t td_m_db_records(td_req_t *req);
td_reply_t td_m_db_best(td_req_t *req);
td_reply_t td_m_db_export(td_req_t *req);
td_reply_t td_m_db_import(td_req_t *req);
td_reply_t td_m_kernel_get(td_req_t *req);
td_reply_t td_m_workload_check(td_req_t *req);

/* db.import's work: db_import_jsonl_checked with every line's workload
 * hash checked against its source and its trace replayed on it. */
int td_import_jsonl(db_t *db, const char *text, size_t len, db_import_stats_t *stats, tn_err_t *err);

/* ---- json.c: the protocol's objects --------------------------------------- */

/* A record object (docs/protocol.md); flops of its workload for GFLOP/s. */
cJSON *td_record_json(const db_record_t *r, double flops);
/* Adds a number, or null when it is not finite. */
void td_json_num(cJSON *obj, const char *key, double v);
/* Parses text as JSON; a string holding the text when it is not JSON. */
cJSON *td_json_embed(const char *text);
/* The job object (docs/protocol.md) of job id as the database has it, on
 * any thread with its own connection; NULL with TN_EINVAL when unknown.
 * td_job_live (jobs.c) then adds the live counters, on the loop. */
cJSON *td_job_read(db_t *db, int64_t id, tn_err_t *err);

/* ---- jobs.c: the job registry (its insides: jobs.h) ------------------------- */

/* Creates the job manager, requeues jobs left running by an earlier daemon
 * and queues every unfinished job (uses srv->wdb; before the loop runs). */
int td_jobs_init(td_server_t *srv, tn_err_t *err);
void td_jobs_free(td_server_t *srv);
/* A job row was created (tune.submit): queue it and start it if a slot is free. */
void td_jobs_add(td_server_t *srv, int64_t id, const char *target);
/* Starts queued jobs while fewer than --jobs run (not while stopping). */
void td_jobs_schedule(td_server_t *srv);
int td_jobs_running(const td_server_t *srv);
int td_jobs_queued(const td_server_t *srv);
/* Asks running jobs to stop at the next candidate (shutdown). */
void td_jobs_stop_all(td_server_t *srv);
/* td_job_read's object with the live counters of the job (if this daemon
 * knows it), on the loop. */
void td_job_live(td_server_t *srv, cJSON *job);
/* tune.watch: c gets tune.progress notifications until the job ends (false:
 * the job is over already, its answer is the last word). */
bool td_jobs_watch(td_server_t *srv, int64_t id, td_conn_t *c);
/* A connection closed: forget its watches. */
void td_jobs_conn_closed(td_server_t *srv, td_conn_t *c);
/* Whether c watches a job (tune.watch): such a connection is not idle. */
bool td_jobs_conn_watching(const td_server_t *srv, const td_conn_t *c);

#endif
