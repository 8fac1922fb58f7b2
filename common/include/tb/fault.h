/*
 * fault.h: fault points, for the tests that prove crash-safe replay. A
 * test starts the worker with TASKBOX_FAULT=<point>[@<n>][:crash] and the
 * worker kills itself (SIGKILL: no clean-up, as a power cut or a kill
 * from outside) the n-th time (1 by default) it reaches that point; with
 * ":crash" it crashes instead (SIGSEGV, raised in the thread that got
 * there, as a bug in the worker would: its fatal-signal handler says so
 * for the next worker, worker/loop/blackbox.h). Without the variable a fault point is one
 * comparison of a pointer with NULL: harmless in production, and the
 * worker says loudly at start when one is armed.
 *
 * The points are the lifecycle's phases (received ... torn-down,
 * acknowledged) and these moments inside them:
 *   manifest-durable  the manifest is stored, the done-marker not yet set
 *   done-marked       the done-marker is set, the sandbox still standing
 *   turn-started      an interactive session began a turn after the
 *                     first (a follow-up's prompt is on its way)
 *   lazy-fetched      a block of an input read on demand came from the
 *                     store, not yet checked or kept (worker/lazy)
 * and one that does not kill but breaks the Kafka consumer (a fatal error,
 * as when the group coordinator fences a static member):
 *   consumer-fatal    a task message was received
 */
#ifndef TB_FAULT_H
#define TB_FAULT_H

/** Reads TASKBOX_FAULT. Returns the armed point's name, or NULL. */
const char *tb_fault_init(void);

/** Whether this is the armed point's n-th arrival. Thread-safe. */
int tb_fault_hit(const char *name);

/** Dies here if this is the armed point's n-th arrival. Thread-safe. */
void tb_fault_point(const char *name);

#endif
