/* rpc.c — JSON-RPC 2.0 on framed lines: envelope checks, the method table,
 * unknown and duplicate params, and dispatch to the methods (methods_*.c).
 * What a method uses to answer is req.c's. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/td.h"

typedef struct td_method {
  const char *name;
  td_method_fn fn;
  const char *params;   /* comma-separated names accepted */
  bool refused_when_stopping;
} td_method_t;

static const td_method_t methods[] = {
    {"server.info", td_m_server_info, "", false},
    {"target.list", td_m_target_list, "", false},
    {"tune.submit", td_m_tune_submit,
     "workload,name,params,target,allow_tf32,trials,seconds,seed,strategy,model,batch_size,population,remeasure,"
     "baseline",
     true},
    {"tune.status", td_m_tune_status, "job", false},
    {"tune.list", td_m_tune_list, "state,limit,offset", false},
    {"tune.cancel", td_m_tune_cancel, "job", false},
    {"tune.watch", td_m_tune_watch, "job", false},
    {"tune.trials", td_m_tune_trials, "job", false},
    {"db.workloads", td_m_db_workloads, "limit,offset,name", false},
    {"db.records", td_m_db_records, "workload,target,status,limit,offset", false},
    {"db.best", td_m_db_best, "workload,target,k", false},
    {"db.export", td_m_db_export, "workload,target", false},
    {"db.import", td_m_db_import, "jsonl", true},
    {"kernel.get", td_m_kernel_get, "workload,workload_text,name,params,target,entry,fallback", false},
    {"workload.check", td_m_workload_check, "workload_text,name,params", false},
    {"server.shutdown", td_m_server_shutdown, "", false},
};

/* Rejects params the method does not know (a typo would otherwise be
 * silently ignored) and params given twice. */
static bool unknown_params(td_req_t *req, const td_method_t *m) {
  const cJSON *it;
  cJSON_ArrayForEach(it, req->params) {
    size_t n = strlen(it->string);
    const char *p = m->params;
    bool known = false;
    while (*p && !known) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      known = len == n && strncmp(p, it->string, n) == 0;
      p += len + (comma != NULL);
    }
    if (!known) {
      td_req_error(req, TD_E_PARAMS, "unknown param \"%.40s\" for %s (valid: %s)", it->string, m->name,
                   m->params[0] ? m->params : "none");
      return true;
    }
    for (const cJSON *o = it->next; o; o = o->next)
      if (strcmp(o->string, it->string) == 0) {
        td_req_error(req, TD_E_PARAMS, "duplicate param \"%s\"", it->string);
        return true;
      }
  }
  return false;
}

/* ---- dispatch ------------------------------------------------------------------- */

static const td_method_t *find_method(const char *name) {
  for (size_t i = 0; i < TN_ARRAY_LEN(methods); i++)
    if (strcmp(methods[i].name, name) == 0) return &methods[i];
  return NULL;
}

static td_reply_t unknown_method(td_req_t *req, const char *name) {
  char known[512];
  int n = 0;
  for (size_t i = 0; i < TN_ARRAY_LEN(methods); i++)
    n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", i ? ", " : "", methods[i].name);
  return td_req_error(req, TD_E_METHOD, "unknown method \"%.60s\" (known: %s)", name, known);
}

/* Checks the envelope; sets req->id (null when it cannot be known). */
static td_reply_t dispatch(td_req_t *req, cJSON *msg) {
  if (cJSON_IsArray(msg)) {
    req->id = cJSON_CreateNull();
    return td_req_error(req, TD_E_REQUEST, "batch requests are not supported: send one request object per line");
  }
  if (!cJSON_IsObject(msg)) {
    req->id = cJSON_CreateNull();
    return td_req_error(req, TD_E_REQUEST, "a request must be a JSON object "
                        "{\"jsonrpc\": \"2.0\", \"id\": N, \"method\": \"...\", \"params\": {...}}");
  }
  cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id) && !cJSON_IsNull(id)) {
    req->id = cJSON_CreateNull();
    return td_req_error(req, TD_E_REQUEST, "\"id\" must be a string, a number or null");
  }
  req->id = id ? cJSON_Duplicate(id, false) : NULL;
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
  if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0)
    return td_req_error(req, TD_E_REQUEST, "\"jsonrpc\" must be \"2.0\"");
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  if (!cJSON_IsString(method)) return td_req_error(req, TD_E_REQUEST, "\"method\" must be a string");
  const td_method_t *m = find_method(method->valuestring);
  if (!m) return unknown_method(req, method->valuestring);
  req->method = m->name;
  cJSON *params = cJSON_DetachItemFromObjectCaseSensitive(msg, "params");
  if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
    cJSON_Delete(params);
    return td_req_error(req, TD_E_PARAMS, "\"params\" must be an object of named params (%s takes: %s)", m->name,
                        m->params[0] ? m->params : "none");
  }
  req->params = cJSON_IsObject(params) ? params : (cJSON_Delete(params), NULL);
  if (unknown_params(req, m)) return TD_REPLY;
  if (m->refused_when_stopping && req->srv->stopping)
    return td_req_error(req, TD_E_STOPPING, "tuned is shutting down and takes no new work; start it again");
  return m->fn(req);
}

/* Byte offset of the first \u0000 escape inside a JSON string of line, or
 * -1: cJSON decodes it to a NUL byte, and every C string after it would be
 * cut short there (a workload would be tuned without its tail). */
static long nul_escape(const char *line, size_t len) {
  bool in_str = false;
  for (size_t i = 0; i < len; i++) {
    if (!in_str) {
      in_str = line[i] == '"';
    } else if (line[i] == '"') {
      in_str = false;
    } else if (line[i] == '\\' && i + 1 < len) {
      if (line[i + 1] == 'u' && i + 5 < len && line[i + 2] == '0' && line[i + 3] == '0' && line[i + 4] == '0' &&
          line[i + 5] == '0')
        return (long)i;
      i++; /* the escaped character */
    }
  }
  return -1;
}

void td_rpc_line(td_conn_t *c, const char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
  size_t skip = 0;
  while (skip < len && (line[skip] == ' ' || line[skip] == '\t')) skip++;
  if (skip == len) return; /* blank lines are keep-alives */
  td_req_t *req = tn_xcalloc(1, sizeof *req);
  req->srv = c->srv;
  req->conn = c;
  req->t0 = tn_now();
  td_conn_ref(c);
  const char *end = NULL;
  cJSON *msg = cJSON_ParseWithLengthOpts(line, len, &end, false);
  size_t at = end ? (size_t)(end - line) : 0;
  while (msg && at < len && (line[at] == ' ' || line[at] == '\t')) at++;
  td_reply_t r;
  long nul = msg ? nul_escape(line, len) : -1;
  if (!msg || at < len) { /* not JSON, or bytes after the value (two messages on one line?) */
    req->id = cJSON_CreateNull();
    r = td_req_error(req, TD_E_PARSE, msg ? "parse error: extra bytes after the JSON value at byte %zu (one "
                                            "message per line)"
                                          : "parse error: not valid JSON (at byte %zu of the line)", at);
  } else if (nul >= 0) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    req->id = id && (cJSON_IsNumber(id) || cJSON_IsString(id)) ? cJSON_Duplicate(id, false) : cJSON_CreateNull();
    r = td_req_error(req, TD_E_REQUEST, "invalid request: a string holds \\u0000 (byte %ld of the line): strings may "
                     "not contain NUL characters", nul);
  } else {
    r = dispatch(req, msg);
  }
  cJSON_Delete(msg);
  if (r == TD_PENDING) {
    req->pending = true;
    c->busy = true;
  } else {
    td_req_finish(req);
  }
}
