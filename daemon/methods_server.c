/* methods_server.c — server.info, target.list and server.shutdown. */
#include <string.h>
#include <unistd.h>

#include "daemon/td.h"
#include "tuned_config.h"

td_reply_t td_m_server_info(td_req_t *req) {
  td_server_t *srv = req->srv;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "version", TUNED_VERSION);
  cJSON_AddStringToObject(o, "target", srv->cfg.target);
  cJSON_AddStringToObject(o, "db", srv->cfg.db_shown);
  cJSON_AddStringToObject(o, "socket", srv->cfg.socket_path);
  cJSON_AddNumberToObject(o, "pid", (double)getpid());
  cJSON_AddNumberToObject(o, "uptime_s", tn_now() - srv->started);
  cJSON_AddNumberToObject(o, "jobs_running", td_jobs_running(srv));
  cJSON_AddNumberToObject(o, "jobs_queued", td_jobs_queued(srv));
  cJSON_AddNumberToObject(o, "max_jobs", srv->cfg.max_jobs);
  cJSON_AddNumberToObject(o, "connections", srv->nconns);
  cJSON_AddBoolToObject(o, "stopping", srv->stopping);
  cJSON_AddNumberToObject(o, "max_message_bytes", TUNED_MAX_MESSAGE);
  cJSON *bs = cJSON_AddArrayToObject(o, "backends");
  for (int b = 0; b < MS_BACKEND__COUNT; b++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", ms_backend_name((ms_backend_t)b));
    cJSON_AddBoolToObject(e, "available", srv->machine.backends[b].available);
    cJSON_AddStringToObject(e, "detail", srv->machine.backends[b].detail);
    cJSON_AddItemToArray(bs, e);
  }
  req->result = o;
  return TD_REPLY;
}

td_reply_t td_m_target_list(td_req_t *req) {
  td_server_t *srv = req->srv;
  cJSON *o = cJSON_CreateObject();
  cJSON *ts = cJSON_AddArrayToObject(o, "targets");
  for (int i = 0; i < srv->ntargets; i++) {
    const td_target_info_t *ti = &srv->targets[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", ti->t.name);
    cJSON_AddStringToObject(e, "kind", tn_target_kind_name(ti->t.kind));
    cJSON_AddStringToObject(e, "arch", ti->t.arch);
    cJSON_AddStringToObject(e, "device", ti->t.device);
    /* the roofline's ceilings (tunectl plot --roofline); 0: unknown */
    cJSON_AddNumberToObject(e, "peak_gflops", ti->t.peak_gflops);
    cJSON_AddNumberToObject(e, "peak_gbps", ti->t.peak_gbps);
    cJSON_AddBoolToObject(e, "usable", ti->usable);
    if (ti->usable) cJSON_AddNullToObject(e, "reason");
    else cJSON_AddStringToObject(e, "reason", ti->reason);
    cJSON_AddBoolToObject(e, "default", strcmp(ti->t.name, srv->cfg.target) == 0);
    cJSON_AddItemToArray(ts, e);
  }
  req->result = o;
  return TD_REPLY;
}

td_reply_t td_m_server_shutdown(td_req_t *req) {
  req->result = cJSON_CreateObject();
  cJSON_AddBoolToObject(req->result, "ok", true);
  req->stop_after = true; /* after the answer is queued, so the client gets it */
  return TD_REPLY;
}
