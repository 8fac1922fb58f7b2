/*
 * cmd_view.c: `taskbox view`: a web page of the runs (docs/view.md):
 * the feed, the index, the live hub and the server (worker/view)
 * started from the same configuration as the other client commands, run
 * until interrupted.
 */
#include "cmd.h"
#include "feed.h"
#include "follow.h"
#include "index.h"
#include "live.h"
#include "server.h"
#include "tb/clock.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WATCHING 256 /* pages following a task live, at once */

static void usage(FILE *out)
{
	fprintf(out, "usage: taskbox view [--config FILE] [--listen HOST:PORT] [--token TOKEN]\n"
		     "                    [--since SECONDS] [--max-tasks N]\n\n"
		     "Serves a web page of the runs: tasks (filter by recipe, runtime, status,\n"
		     "time; search by id), each task's conversation, phases, verdicts,\n"
		     "artifacts (download) and egress, live while it runs; and the fleet's\n"
		     "throughput, failures and lag. It reads the tasks, events and DLQ topics\n"
		     "(no consumer group: it takes nothing from the workers) and the store.\n"
		     "  --listen HOST:PORT  where to listen (127.0.0.1:8080; port 0: any free\n"
		     "                      one). Bound to loopback, it answers only requests\n"
		     "                      addressed to that address. Elsewhere a token is\n"
		     "                      required: open http://HOST:PORT/login?token=TOKEN\n"
		     "  --token TOKEN       that token (16 to 256 letters, digits, '.', '_',\n"
		     "                      '~', '-'; or the TASKBOX_VIEW_TOKEN variable)\n"
		     "  --since SECONDS     only what happened in the last SECONDS (default:\n"
		     "                      all the topics keep)\n"
		     "  --max-tasks N       tasks kept in memory (20000): past it, the least\n"
		     "                      recently active tenth is forgotten\n"
		     "It prints the page's address, then runs until interrupted.\n"
		     "Exit: 0 interrupted, 1 Kafka or the listen address failed, 2 usage,\n"
		     "3 configuration.\n");
}

int tb_cmd_view(int argc, char **argv)
{
	const char *path = NULL, *listen = "127.0.0.1:8080", *token = getenv("TASKBOX_VIEW_TOKEN");
	uint64_t since_s = 0, max_tasks = 20000;
	tb_ledger_t *ledger = NULL;
	tb_store_t *store = NULL;
	tb_view_index_t *index = NULL;
	tb_view_live_t *live = NULL;
	tb_view_feed_t *feed = NULL;
	tb_view_server_t *server = NULL;
	tb_config_t cfg;
	tb_error_t err;
	int rc;

	const tb_opt_t opts[] = {
		{ "--config", TB_OPT_STRING, &path, 0, 0, NULL, 'c' },
		{ "--listen", TB_OPT_STRING, &listen, 0, 0, NULL, 'l' },
		{ "--token", TB_OPT_STRING, &token, 0, 0, NULL, 0 },
		{ "--since", TB_OPT_UINT, &since_s, 1, 366 * 86400, "seconds", 0 },
		{ "--max-tasks", TB_OPT_UINT, &max_tasks, 16, 10000000, "tasks", 0 },
		{ NULL, 0, NULL, 0, 0, NULL, 0 },
	};
	tb_opts_t opt = { "view", opts, NULL, 0, 0 };

	if ((rc = tb_cmd_options(&opt, argc, argv, 1, usage)) >= 0)
		return rc;
	/* a thread per connection: without a bound, glibc gives many of them
	 * an arena of their own, memory the server then keeps */
	mallopt(M_ARENA_MAX, 2);
	if (tb_cmd_load_config(&cfg, path, &err) < 0) {
		fprintf(stderr, "taskbox view: %s\n", err.msg);
		return TB_EXIT_CONFIG;
	}
	rc = TB_EXIT_FAILURE;
	if (!strcmp(cfg.kafka.brokers, "mock")) {
		fprintf(stderr, "taskbox view: kafka.brokers is 'mock', which lives inside one "
				"process: point it at the cluster (TASKBOX_KAFKA_BROKERS)\n");
		rc = TB_EXIT_CONFIG;
		goto out;
	}
	/* the store for manifests and downloads; without it, the events alone */
	if (tb_cmd_open_fleet("view", &cfg, &ledger, &store, &err) != TB_EXIT_OK)
		fprintf(stderr, "taskbox view: %s (no manifests or downloads)\n", err.msg);
	int64_t since =
	    since_s ? (int64_t)tb_wall_ms() - (int64_t)since_s * 1000 : TB_FOLLOW_BEGINNING;
	if (tb_view_index_new(&index, (size_t)max_tasks, &err) < 0 ||
	    !(live = tb_view_live_new(MAX_WATCHING)) ||
	    tb_view_feed_start(&feed, &cfg, since, index, live, &err) < 0) {
		fprintf(stderr, "taskbox view: %s\n", live ? err.msg : "out of memory");
		goto out;
	}
	tb_view_server_conf_t sc = { .listen = listen,
				     .token = token && token[0] ? token : NULL,
				     .cfg = &cfg,
				     .index = index,
				     .live = live,
				     .feed = feed,
				     .store = store,
				     .ledger = ledger };
	if (tb_view_server_start(&server, &sc, &err) < 0) {
		fprintf(stderr, "taskbox view: %s\n", err.msg);
		rc = err.code == TB_EINVAL ? TB_EXIT_USAGE : TB_EXIT_FAILURE;
		goto out;
	}
	printf("taskbox view: %s/\n", tb_view_server_url(server));
	if (sc.token) /* a browser needs it once, as a cookie (docs/view.md) */
		printf("taskbox view: log in once at %s/login?token=%s\n",
		       tb_view_server_url(server), sc.token);
	fflush(stdout);
	/* blocked but while waiting: a signal between the test and the wait
	 * is not lost */
	sigset_t mask, old;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	tb_cmd_stop_on_signals();
	while (!tb_cmd_stop)
		sigsuspend(&old);
	sigprocmask(SIG_SETMASK, &old, NULL);
	rc = TB_EXIT_OK;
out:
	if (live)
		tb_view_live_close(live); /* the pages' streams end at once */
	tb_view_server_stop(server);
	tb_view_feed_stop(feed);
	tb_view_live_free(live);
	tb_view_index_free(index);
	if (ledger)
		tb_ledger_close(ledger);
	tb_store_close(store);
	tb_config_free(&cfg);
	return rc;
}
