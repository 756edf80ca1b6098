/* pgtest.h — a throw-away PostgreSQL server for the test suites: initdb into
 * a temporary directory, listening on a unix socket there only (no TCP),
 * run as the postgres user when the tests run as root (initdb and postgres
 * refuse root), stopped and deleted at the end.  Trust login for everyone
 * but the role pgt_pw_user, which needs its password (for the tests of a
 * wrong one).  Where the server binaries are missing, pgt_start says why
 * and the suites skip their PostgreSQL half. */
#ifndef TUNED_TEST_PGTEST_H
#define TUNED_TEST_PGTEST_H

#include <glob.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuned_config.h"

#if TUNED_HAVE_LIBPQ
#include <libpq-fe.h>
#endif

#define pgt_pw_user "tuned_pw"
#define pgt_pw_password "right-password"

typedef struct pgt_server {
  char dir[64];       /* data/, the socket, the logs */
  char bin[256];      /* /usr/lib/postgresql/N/bin */
  char as_user[64];   /* "runuser -u postgres -- " when root, else "" */
  bool running;
  char preload[300];  /* a library the server runs with (LD_PRELOAD), or "" */
  char skip[512];     /* why there is no server, when there is none */
} pgt_server_t;

/* The newest /usr/lib/postgresql/N/bin with initdb and postgres. */
static inline bool pgt_find_bin(char *bin, size_t size) {
  glob_t g;
  bool found = false;
  if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) { /* glob sorts: the last is the newest (one digit or two) */
      char init[300];
      snprintf(init, sizeof init, "%.*s/initdb", (int)(strlen(g.gl_pathv[i]) - strlen("/postgres")), g.gl_pathv[i]);
      if (access(init, X_OK) == 0) {
        snprintf(bin, size, "%.*s", (int)(strlen(g.gl_pathv[i]) - strlen("/postgres")), g.gl_pathv[i]);
        found = true;
      }
    }
    globfree(&g);
  }
  return found;
}

static inline int pgt_sh(const pgt_server_t *s, const char *cmd) {
  char line[2048];
  snprintf(line, sizeof line, "%s%s", s->as_user, cmd);
  return system(line);
}

/* A connection to database `db` of the server as the superuser. */
static inline void pgt_url(const pgt_server_t *s, const char *db, char *buf, size_t size) {
  snprintf(buf, size, "postgresql:///%s?host=%s&user=postgres", db, s->dir);
}

#if TUNED_HAVE_LIBPQ
static inline void pgt_quiet(void *arg, const char *msg) { (void)arg, (void)msg; }
#endif

/* Runs SQL (a command, or a query whose rows are dropped) on the postgres
 * database; 0 or -1 (with the message in skip). */
static inline int pgt_admin(pgt_server_t *s, const char *sql) {
#if !TUNED_HAVE_LIBPQ
  snprintf(s->skip, sizeof s->skip, "%s: this build has no libpq", sql);
  return -1;
#else
  char url[256];
  pgt_url(s, "postgres", url, sizeof url);
  PGconn *c = PQconnectdb(url);
  PQsetNoticeProcessor(c, pgt_quiet, NULL);
  PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
  int rc = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK) ? 0 : -1;
  if (rc) snprintf(s->skip, sizeof s->skip, "%s: %s", sql, PQerrorMessage(c));
  PQclear(r);
  PQfinish(c);
  return rc;
#endif
}

/* pg_ctl start, stop or restart (fast shutdown), the server listening on
 * its directory's socket only; 0 or pg_ctl's status. */
static inline int pgt_ctl(const pgt_server_t *s, const char *what) {
  char cmd[1536];
  /* fsync off: the tests kill clients and stop the server, never the machine */
  char env[700] = "";
  if (s->preload[0]) /* the shim's flag file: in the server's directory */
    snprintf(env, sizeof env, "env LD_PRELOAD=%s TUNED_ENOSPC_FLAG=%s/enospc ", s->preload, s->dir);
  snprintf(cmd, sizeof cmd, "%s%s/pg_ctl -D %s/data -l %s/server.log -w -t 60 -m fast -o \"-c listen_addresses='' "
           "-c unix_socket_directories=%s -c fsync=off -c max_connections=200\" %s >/dev/null 2>&1",
           env, s->bin, s->dir, s->dir, s->dir, what);
  return pgt_sh(s, cmd);
}

/* Starts the server; preload (or NULL): a library it runs with. */
static inline int pgt_start_with(pgt_server_t *s, const char *preload) {
  memset(s, 0, sizeof *s);
  if (preload) snprintf(s->preload, sizeof s->preload, "%s", preload);
  if (!TUNED_HAVE_LIBPQ) {
    snprintf(s->skip, sizeof s->skip, "this build has no libpq (install libpq-dev and reconfigure)");
    return -1;
  }
  if (!pgt_find_bin(s->bin, sizeof s->bin)) {
    snprintf(s->skip, sizeof s->skip, "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb and postgres);"
             " install the postgresql package (scripts/install-deps)");
    return -1;
  }
  snprintf(s->dir, sizeof s->dir, "/tmp/tuned-pg-XXXXXX");
  if (!mkdtemp(s->dir)) {
    snprintf(s->skip, sizeof s->skip, "mkdtemp failed");
    return -1;
  }
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("postgres");
    if (!pw || chown(s->dir, pw->pw_uid, pw->pw_gid) != 0) {
      snprintf(s->skip, sizeof s->skip, "running as root and there is no postgres user to run the server as");
      return -1;
    }
    snprintf(s->as_user, sizeof s->as_user, "runuser -u postgres -- ");
  }
  char cmd[1536];
  snprintf(cmd, sizeof cmd, "%s/initdb -D %s/data -U postgres -A trust --locale=C -E UTF8 --no-sync >%s/initdb.log 2>&1",
           s->bin, s->dir, s->dir);
  if (pgt_sh(s, cmd) != 0) {
    snprintf(s->skip, sizeof s->skip, "initdb failed (see %s/initdb.log)", s->dir);
    return -1;
  }
  /* the password role first: pg_hba takes the first line that matches */
  snprintf(cmd, sizeof cmd, "sh -c 'printf \"local all %s scram-sha-256\\nlocal all all trust\\n\" > %s/data/pg_hba.conf'",
           pgt_pw_user, s->dir);
  if (pgt_sh(s, cmd) != 0) {
    snprintf(s->skip, sizeof s->skip, "cannot write %s/data/pg_hba.conf", s->dir);
    return -1;
  }
  if (pgt_ctl(s, "start") != 0) {
    snprintf(s->skip, sizeof s->skip, "the server did not start (see %s/server.log)", s->dir);
    return -1;
  }
  s->running = true;
  return pgt_admin(s, "CREATE ROLE " pgt_pw_user " LOGIN SUPERUSER PASSWORD '" pgt_pw_password "'");
}

static inline int pgt_start(pgt_server_t *s) { return pgt_start_with(s, NULL); }

/* Creates database `name` (dropped first when it exists) and sets url to it. */
static inline int pgt_createdb(pgt_server_t *s, const char *name, char *url, size_t size) {
  char sql[200];
  snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
  if (pgt_admin(s, sql)) return -1;
  snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
  if (pgt_admin(s, sql)) return -1;
  pgt_url(s, name, url, size);
  return 0;
}

static inline void pgt_stop(pgt_server_t *s) {
  if (s->running) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -m immediate -w stop >/dev/null 2>&1", s->bin, s->dir);
    pgt_sh(s, cmd);
    s->running = false;
  }
  if (s->dir[0]) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    if (system(cmd) != 0) fprintf(stderr, "pgtest: could not remove %s\n", s->dir);
  }
}

#endif
