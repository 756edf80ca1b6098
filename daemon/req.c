/* req.c — a JSON-RPC request as methods see it: typed params with -32602
 * errors that name the param, errors and answers (written to the
 * connection), and thread-pool work and reader-thread queries for methods
 * that must not run on the loop. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/td.h"

/* ---- answers ------------------------------------------------------------------ */

td_reply_t td_req_error(td_req_t *req, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[TN_ERR_MSG_MAX + 256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  free(req->message);
  req->message = tn_xstrdup(msg);
  req->code = code;
  cJSON_Delete(req->result);
  req->result = NULL;
  return TD_REPLY;
}

td_reply_t td_req_tn_error(td_req_t *req, int dflt, const tn_err_t *err) {
  int code = err->code == TN_EINVAL ? dflt : TD_E_INTERNAL;
  return td_req_error(req, code, "%s", err->msg[0] ? err->msg : tn_strerror(err->code));
}

static char *response_text(td_req_t *req) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "jsonrpc", "2.0");
  cJSON_AddItemToObject(r, "id", cJSON_Duplicate(req->id, true));
  if (req->code) {
    cJSON *e = cJSON_AddObjectToObject(r, "error");
    cJSON_AddNumberToObject(e, "code", req->code);
    cJSON_AddStringToObject(e, "message", req->message ? req->message : "error");
  } else {
    cJSON_AddItemToObject(r, "result", req->result ? req->result : cJSON_CreateNull());
    req->result = NULL;
  }
  char *s = cJSON_PrintUnformatted(r);
  cJSON_Delete(r);
  return s;
}

void td_req_finish(td_req_t *req) {
  td_conn_t *c = req->conn;
  if (req->id && c && !c->closing) {
    char *s = req->line ? req->line : response_text(req);
    req->line = NULL;
    if (s) td_conn_send(c, s, strlen(s), false);
    free(s);
  }
  free(req->line);
  /* A client's mistakes are its own business (and must not flood the log). */
  td_log(req->code == TD_E_INTERNAL ? TD_WARN : TD_DEBUG, "request", "conn=%llu method=%s ms=%.3f code=%d%s%s", c ? (unsigned long long)c->id : 0ULL,
         req->method ? req->method : "-", (tn_now() - req->t0) * 1e3, req->code, req->code ? " err=" : "",
         req->code ? td_q(req->message) : "");
  if (req->stop_after) td_server_stop(req->srv, "server.shutdown");
  if (req->free_data) req->free_data(req->data);
  cJSON_Delete(req->id);
  cJSON_Delete(req->params);
  cJSON_Delete(req->result);
  free(req->message);
  bool pending = req->pending;
  free(req);
  if (c) {
    if (pending) {
      c->busy = false;
      td_conn_process(c);
    }
    td_conn_unref(c);
  }
}

/* ---- thread-pool work ------------------------------------------------------------ */

static void work_cb(uv_work_t *w) {
  td_req_t *req = w->data;
  req->work_fn(req);
}

/* On the loop: done, then the answer unless done queued more for req. */
static void finish_pending(td_req_t *req) {
  req->requeued = false;
  if (req->done_fn) req->done_fn(req);
  if (!req->requeued) td_req_finish(req);
}

static void after_work_cb(uv_work_t *w, int status) {
  td_req_t *req = w->data;
  td_server_t *srv = req->srv;
  srv->inflight_work--;
  if (status == UV_ECANCELED) {
    td_req_error(req, TD_E_STOPPING, "cancelled: tuned is shutting down");
    td_req_finish(req);
  } else {
    finish_pending(req);
  }
  td_server_maybe_exit(srv);
}

td_reply_t td_req_queue_work(td_req_t *req, td_work_fn work, td_work_fn done) {
  req->work_fn = work;
  req->done_fn = done;
  req->work.data = req;
  int rc = uv_queue_work(req->srv->loop, &req->work, work_cb, after_work_cb);
  if (rc) return td_req_error(req, TD_E_INTERNAL, "cannot queue work: %s", uv_strerror(rc));
  req->srv->inflight_work++;
  req->requeued = true;
  return TD_PENDING;
}

static void read_cb(td_read_t *r, db_t *db) {
  td_req_t *req = (td_req_t *)((char *)r - offsetof(td_req_t, read));
  req->read_fn(req, db);
  /* Rendering a 5-10 KB answer is most of a query's work: not on the loop. */
  if (!req->done_fn && req->id) req->line = response_text(req);
}

static void read_done_cb(td_read_t *r) {
  finish_pending((td_req_t *)((char *)r - offsetof(td_req_t, read)));
}

td_reply_t td_req_queue_read(td_req_t *req, td_read_fn work, td_work_fn done) {
  req->read_fn = work;
  req->done_fn = done;
  if (td_read_queue(req->srv, &req->read, read_cb, read_done_cb) != 0)
    return td_req_error(req, TD_E_STOPPING, "tuned is shutting down");
  req->requeued = true;
  return TD_PENDING;
}

/* ---- params ---------------------------------------------------------------------- */

static const cJSON *param(td_req_t *req, const char *name) {
  return req->params ? cJSON_GetObjectItemCaseSensitive(req->params, name) : NULL;
}

static const char *json_type(const cJSON *j) {
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsNumber(j)) return "a number";
  if (cJSON_IsBool(j)) return "a boolean";
  if (cJSON_IsNull(j)) return "null";
  if (cJSON_IsArray(j)) return "an array";
  return "an object";
}

static int bad(td_req_t *req, const char *name, const char *rule, const cJSON *got) {
  if (!got) td_req_error(req, TD_E_PARAMS, "missing param \"%s\": %s", name, rule);
  else td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s, got %s", name, rule, json_type(got));
  return -1;
}

int td_param_str(td_req_t *req, const char *name, bool required, size_t maxlen, const char **out) {
  const cJSON *j = param(req, name);
  *out = NULL;
  if (!j || cJSON_IsNull(j)) return required ? bad(req, name, "a string is required", NULL) : 0;
  if (!cJSON_IsString(j)) return bad(req, name, "must be a string", j);
  if (strlen(j->valuestring) > maxlen) {
    td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": longer than %zu bytes", name, maxlen);
    return -1;
  }
  *out = j->valuestring;
  return 0;
}

int td_param_int(td_req_t *req, const char *name, bool required, int64_t dflt, int64_t min,
                 int64_t max, int64_t *out) {
  const cJSON *j = param(req, name);
  *out = dflt;
  char rule[128];
  snprintf(rule, sizeof rule, "must be an integer from %lld to %lld", (long long)min, (long long)max);
  if (!j || cJSON_IsNull(j)) return required ? bad(req, name, rule, NULL) : 0;
  if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble)) return bad(req, name, rule, j);
  if (j->valuedouble < (double)min || j->valuedouble > (double)max) {
    td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s, got %.17g", name, rule, j->valuedouble);
    return -1;
  }
  *out = (int64_t)j->valuedouble;
  return 0;
}

int td_param_num(td_req_t *req, const char *name, double dflt, double min, double max, double *out) {
  const cJSON *j = param(req, name);
  *out = dflt;
  char rule[128];
  snprintf(rule, sizeof rule, "must be a number from %g to %g", min, max);
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsNumber(j)) return bad(req, name, rule, j);
  if (!(j->valuedouble >= min && j->valuedouble <= max)) {
    td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s, got %g", name, rule, j->valuedouble);
    return -1;
  }
  *out = j->valuedouble;
  return 0;
}

int td_param_bool(td_req_t *req, const char *name, bool dflt, bool *out) {
  const cJSON *j = param(req, name);
  *out = dflt;
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsBool(j)) return bad(req, name, "must be true or false", j);
  *out = cJSON_IsTrue(j);
  return 0;
}

int td_param_enum(td_req_t *req, const char *name, const char *const *values, int dflt, int *out) {
  const cJSON *j = param(req, name);
  *out = dflt;
  char rule[256];
  int n = snprintf(rule, sizeof rule, "must be one of");
  for (int i = 0; values[i] && n < (int)sizeof rule - 40; i++)
    n += snprintf(rule + n, sizeof rule - (size_t)n, "%s \"%s\"", i ? "," : "", values[i]);
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsString(j)) return bad(req, name, rule, j);
  for (int i = 0; values[i]; i++)
    if (strcmp(values[i], j->valuestring) == 0) return *out = i, 0;
  td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s, got \"%.40s\"", name, rule, j->valuestring);
  return -1;
}

int td_param_hash(td_req_t *req, const char *name, bool required, char out[TN_ID_SIZE]) {
  const cJSON *j = param(req, name);
  out[0] = 0;
  static const char rule[] = "must be a workload hash: 64 lower-case hex digits, or its first 32 or more "
                             "(see `tunectl check`)";
  if (!j || cJSON_IsNull(j)) return required ? bad(req, name, rule, NULL) : 0;
  if (!cJSON_IsString(j)) return bad(req, name, rule, j);
  const char *s = j->valuestring;
  if (!tn_id_prefix_valid(s)) {
    td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s, got \"%.80s\"", name, rule, s);
    return -1;
  }
  snprintf(out, TN_ID_SIZE, "%s", s);
  return 0;
}

int td_hash_resolve(td_req_t *req, db_t *db, char hash[TN_ID_SIZE]) {
  if (!hash[0] || strlen(hash) == TN_ID_HEX) return 0;
  char whole[TN_ID_SIZE];
  bool found = false;
  tn_err_t err = {0};
  int rc = db_workload_resolve(db, hash, whole, &found, &err);
  if (rc) return td_req_tn_error(req, rc == TN_ESTATE ? TD_E_PARAMS : TD_E_INTERNAL, &err), -1;
  if (found) memcpy(hash, whole, TN_ID_SIZE);
  return 0;
}

int td_param_target(td_req_t *req, const char *name, bool need_usable, td_target_info_t *out) {
  return td_param_target_tf32(req, name, need_usable, false, out);
}

int td_param_target_tf32(td_req_t *req, const char *name, bool need_usable, bool tf32, td_target_info_t *out) {
  const char *s;
  if (td_param_str(req, name, false, 63, &s)) return -1;
  if (!s) s = req->srv->cfg.target;
  char with[80];
  size_t n = strlen(s);
  if (tf32 && !(n >= 5 && !strcmp(s + n - 5, "+tf32"))) {
    snprintf(with, sizeof with, "%s+tf32", s);
    s = with;
  }
  for (int i = 0; i < req->srv->ntargets; i++)
    if (strcmp(req->srv->targets[i].t.name, s) == 0) {
      *out = req->srv->targets[i];
      goto found;
    }
  tn_err_t err = {0};
  if (td_target_check(&req->srv->machine, s, out, &err)) {
    td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s", name, err.msg);
    return -1;
  }
found:
  if (need_usable && !out->usable) {
    td_req_error(req, TD_E_TARGET, "target %s refused: %s", out->t.name, out->reason);
    return -1;
  }
  return 0;
}

int td_param_overrides(td_req_t *req, const char *name, cJSON **out) {
  const cJSON *j = param(req, name);
  *out = NULL;
  static const char rule[] = "must be an object of workload parameters with integer values, e.g. {\"M\": 64}";
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsObject(j)) return bad(req, name, rule, j);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (!it->string[0] || strlen(it->string) > 63) {
      td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": \"%.40s\" is not a parameter name", name, it->string);
      return -1;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 1e15) {
      td_req_error(req, TD_E_PARAMS, "invalid param \"%s\": %s; \"%.40s\" is %s", name, rule, it->string,
                   cJSON_IsNumber(it) ? "not an integer" : json_type(it));
      return -1;
    }
  }
  *out = cJSON_Duplicate(j, true);
  return 0;
}
