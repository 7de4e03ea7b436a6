#!/usr/bin/env python3
"""Multi-process tests of pscom_run with the PMIx client programs in clients/.

    run_case.py CASE PSCOM_RUN CLIENT_DIR

Each case starts pscom_run in its own session, with a watchdog that kills
the whole session, and checks the exit status, the time taken and what the
processes printed.  Exit 0: pass, 1: fail, 77: skipped.
"""
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

WATCHDOG = 45   # seconds for one launch; the meson timeout is larger


class Fail(Exception):
    pass


class Run:
    def __init__(self, status, out, err, secs):
        self.status, self.out, self.err, self.secs = status, out, err, secs

    def __str__(self):
        return ("exit status %s after %.2f s\n--- stdout\n%s--- stderr\n%s---"
                % (self.status, self.secs, self.out, self.err))


def start(args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e, start_new_session=True)


def finish(proc, t0, watchdog=WATCHDOG):
    try:
        out, err = proc.communicate(timeout=watchdog)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise Fail("watchdog: no end after %d s\n%s"
                   % (watchdog, Run(None, out, err, time.monotonic() - t0)))
    return Run(proc.returncode, out, err, time.monotonic() - t0)


def read_ready(p, t0, n):
    """Read p's stdout line by line until n lines start with "ready" (or it
    ends, or the watchdog's time passed): the lines and that count."""
    lines, ready = [], 0
    while ready < n and time.monotonic() - t0 < WATCHDOG:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        ready += line.startswith("ready")
    return lines, ready


def launch(args, env=None, watchdog=WATCHDOG):
    t0 = time.monotonic()
    return finish(start(args, env), t0, watchdog)


def check(cond, what, run):
    if not cond:
        raise Fail("%s\n%s" % (what, run))


def no_failures(run):
    check("FAIL" not in run.err and "FAIL" not in run.out,
          "a client reported a failure", run)


def expect(run, status, ok_pattern=None, count=0, max_secs=None):
    no_failures(run)
    check(run.status == status, "exit status %s, expected %s" % (run.status, status), run)
    if ok_pattern:
        n = len(re.findall(ok_pattern, run.out, re.M))
        check(n == count, "%d lines match %r, expected %d" % (n, ok_pattern, count), run)
    if max_secs is not None:
        check(run.secs < max_secs, "took %.2f s, limit %s s" % (run.secs, max_secs), run)


class Cases:
    def __init__(self, pscom_run, clients):
        self.R = pscom_run
        self.c = lambda name: os.path.join(clients, name)

    # Job information, Resolve_peers/Resolve_nodes.
    def jobinfo(self):
        r = launch([self.R, "-n", "3", self.c("t_jobinfo"), "1", "3"])
        expect(r, 0, r"^jobinfo ok", 3)

    def jobinfo_mpmd(self):
        j = self.c("t_jobinfo")
        r = launch([self.R, "-n", "2", j, "2", "2", "3", ":", "-n", "3", j, "2", "2", "3"])
        expect(r, 0, r"^jobinfo ok", 5)

    def fence_by_host(self):
        # The library hands every fence to the host's fence_nb.
        j = self.c("t_jobinfo")
        r = launch([self.R, "-n", "2", j, "2", "2", "1", ":", "-n", "1", j, "2", "2", "1"],
                   env={"PMIX_MCA_pmix_server_fence_localonly_opt": "0"})
        expect(r, 0, r"^jobinfo ok", 3)

    # Publish/lookup datastore.
    def pubsub(self):
        p = self.c("t_pubsub")
        r = launch([self.R, "-n", "2", p, "2", ":", "-n", "2", p, "2"])
        expect(r, 0, r"^pubsub ok", 4)

    def lookup_wait(self):
        w = self.c("t_wait")
        r = launch([self.R, "-n", "1", w, "2", ":", "-n", "1", w, "2"])
        expect(r, 0, r"^wait ok", 2, max_secs=20)

    # Events.
    def events(self):
        e = self.c("t_events")
        r = launch([self.R, "-n", "2", e, "2", ":", "-n", "2", e, "2"])
        expect(r, 0, r"^events ok", 4)

    def _term_lines(self, r, n):
        lines = re.findall(r"^term event PROC TERMINATED affected (\S+):(\d+) after ([\d.]+) s",
                           r.out, re.M)
        check(len(lines) == n, "%d survivors reported the termination event, expected %d"
              % (len(lines), n), r)
        for ns, rank, secs in lines:
            check(rank == "1" and ns.endswith(".0"), "the event names %s:%s" % (ns, rank), r)
            check(float(secs) < 2.0, "the event came after %s s" % secs, r)

    def killed_rank(self):
        t = self.c("t_term")
        r = launch([self.R, "-n", "2", t, "2", "kill", ":", "-n", "2", t, "2", "kill"])
        expect(r, 128 + 9, max_secs=15)
        self._term_lines(r, 3)

    def killed_rank_keep_going(self):
        t = self.c("t_term")
        r = launch([self.R, "--keep-going", "-n", "2", t, "2", "kill", "keep", ":",
                    "-n", "2", t, "2", "kill", "keep"])
        expect(r, 128 + 9, r"^survivor \d:\d done", 3, max_secs=15)
        self._term_lines(r, 3)
        check("the others keep going" in r.err, "pscom_run did not say the others keep going", r)

    def killed_rank_late_joiner(self):
        # App 1 rank 0 starts after the death and still gets the event once.
        t = self.c("t_term")
        r = launch([self.R, "--keep-going", "-n", "2", t, "2", "late", ":",
                    "-n", "2", t, "2", "late"])
        expect(r, 128 + 9, r"^term event PROC TERMINATED affected \S+:1 ", 3, max_secs=15)

    def death_before_fence(self):
        for when in ("before", "after"):
            r = launch([self.R, "-n", "3", self.c("t_fence_death"), "1", when])
            expect(r, 7, max_secs=10)

    def death_before_fence_keep_going(self):
        for when in ("before", "after"):
            r = launch([self.R, "--keep-going", "-n", "3", self.c("t_fence_death"), "1", when])
            # The fence ends for the survivors: failed (PMIX_ERR_PARTIAL_SUCCESS)
            # when they were in it when the death was seen, else complete
            # among the survivors.
            expect(r, 7, r"^fence returned ", 2, max_secs=10)

    # A process that exits with 0 without PMIx_Init while the others of
    # its namespace use PMIx leaves them waiting in their fence: the job
    # ends (status 1), whether it exits before any of them has connected
    # ("before") or after ("late"; mpirun ends the job only then). With
    # --keep-going a stand-in ends it for the library and their fence
    # returns. Before, the job hung without --keep-going. Processes of a
    # namespace that nobody connects from (no PMIx) may exit 0 as they like.
    def exit0_without_init(self):
        t = self.c("t_fence_death")
        for when in ("before", "late"):
            r = launch([self.R, "-n", "3", t, "1", when, "0"])
            expect(r, 1, max_secs=10)
            check("rank 1 exited without calling PMIx_Init, which other processes of its "
                  "namespace called; ending the job" in r.err, "no message naming rank 1", r)
            r = launch([self.R, "--keep-going", "-n", "3", t, "1", when, "0"])
            expect(r, 0, r"^fence returned ", 2, max_secs=10)
            check("rank 1 exited without calling PMIx_Init" in r.err,
                  "no message naming rank 1", r)
        r = launch([self.R, "-n", "2", "sh", "-c", "exit 0", ":",
                    "-n", "1", self.c("t_late"), "2", "status"])
        expect(r, 0, r"^publish status: SUCCESS$", 1, max_secs=10)
        check("PMIx_Init" not in r.err, "a process without PMIx was reported", r)

    # Abort, signals, output.
    def abort(self):
        # The exit status is the status's low 8 bits, as exit() keeps them,
        # but 1 where they are 0 or the status is negative (256 exited 0,
        # and -1 255, pscom_run's own failure).
        for status, want in ((42, 42), (300, 44), (256, 1), (0, 1), (-1, 1)):
            r = launch([self.R, "-n", "3", self.c("t_abort"), "1", str(status)])
            expect(r, want, max_secs=10)
            check("t_abort: rank 1 gives up" in r.err, "the abort message was not shown", r)
            said = "called PMIx_Abort with status %d%s:" % (
                status, "" if want == status else " (exit status %d)" % want)
            check(said in r.err, "no line saying %r" % said, r)

    def _signal(self, mode, sig, status, caught):
        t0 = time.monotonic()
        p = start([self.R, "-n", "3", self.c("t_signal"), "1", mode])
        lines, ready = read_ready(p, t0, 3)
        if ready < 3:
            os.killpg(p.pid, signal.SIGKILL)
        else:
            os.kill(p.pid, sig)         # pscom_run only, not its children
        r = finish(p, t0)
        r.out = "".join(lines) + r.out
        check(ready == 3, "only %d processes became ready" % ready, r)
        expect(r, status, r"^rank \d caught signal %d" % sig, caught, max_secs=15)

    def signal_forward_caught(self):
        self._signal("catch", signal.SIGTERM, 100 + signal.SIGTERM, 3)

    def signal_forward_default(self):
        self._signal("default", signal.SIGINT, 128 + signal.SIGINT, 0)

    # Under nohup (SIGHUP ignored) pscom_run neither ends nor forwards on a
    # SIGHUP, and its processes inherit it ignored (SigIgn bit 0).
    def hup_ignored(self):
        t0 = time.monotonic()
        cmd = ("trap '' HUP; exec %s -n 2 sh -c "
               "'grep SigIgn /proc/self/status; echo ready; sleep 1.5'" % self.R)
        p = start(["sh", "-c", cmd])
        lines, ready = read_ready(p, t0, 2)
        os.kill(p.pid, signal.SIGHUP)  # pscom_run itself (the exec'd sh)
        r = finish(p, t0)
        r.out = "".join(lines) + r.out
        check(ready == 2, "only %d processes became ready" % ready, r)
        expect(r, 0)
        ign = [int(l.split()[1], 16) for l in r.out.splitlines() if l.startswith("SigIgn:")]
        check(len(ign) == 2 and all(m & 1 for m in ign),
              "the processes do not ignore SIGHUP: %s" % ign, r)

    def tag_output(self):
        o = self.c("t_output")
        r = launch([self.R, "--tag-output", "-n", "2", o, "2", ":", "-n", "1", o, "2"])
        expect(r, 0)
        for app, rank in ((0, 0), (0, 1), (1, 0)):
            for text in ("out line one of", "out in two pieces", "no newline at the end"):
                want = "[%d:%d] %s %d:%d\n" % (app, rank, text, app, rank)
                check(want in r.out, "missing tagged line %r" % want, r)
            want = "[%d:%d] err line of %d:%d\n" % (app, rank, app, rank)
            check(want in r.err, "missing tagged stderr line %r" % want, r)
        check(len(r.out.splitlines()) == 9, "%d stdout lines, expected 9"
              % len(r.out.splitlines()), r)
        r = launch([self.R, "--tag-output", "-n", "2", o, "1"])
        expect(r, 0)
        check("[1] out in two pieces 0:1\n" in r.out, "single-app tag is not [rank]", r)

    # --bind-to: process i of the job on the i-th core (its hardware threads
    # that pscom_run may use) or CPU of pscom_run's own set, round robin;
    # without it, every process may use the whole set. pscom_run runs in a
    # narrowed set that leaves out the lowest CPU (when there are two or
    # more), so that "the i-th CPU of the set" differs from "CPU i".
    def bind_to_core(self):
        mine = sorted(os.sched_getaffinity(0))
        subset = mine[1:4] if len(mine) > 1 else mine
        taskset = ["taskset", "-c", ",".join(map(str, subset))]
        show = ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]

        def allowed(line):
            cpus = set()
            for part in line.split("\t")[1].split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            return cpus

        def siblings(c):
            try:
                with open("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list" % c) as f:
                    return allowed("x\t" + f.read().strip())
            except OSError:
                return {c}

        cores = []  # the cores of subset, each as the set of its threads in subset
        for c in subset:
            core = siblings(c) & set(subset)
            if core not in cores:
                cores.append(core)
        # One process more than there are units, in two applications: the
        # first unit is used twice.
        def run_bound(prefix, launcher, how, units):
            n = len(units) + 1
            r = launch(prefix + [launcher, "--bind-to", how, "--tag-output", "-n", "1"] + show +
                       [":", "-n", str(n - 1)] + show)
            expect(r, 0)
            lines = {l.split(" ", 1)[0]: l for l in r.out.splitlines() if "Cpus_allowed" in l}
            for i in range(n):
                tag = "[0:0]" if i == 0 else "[1:%d]" % (i - 1)
                check(tag in lines, "no line of %s" % tag, r)
                got = allowed(lines[tag])
                check(got == units[i % len(units)], "--bind-to %s: %s has CPUs %s, expected %s"
                      % (how, tag, sorted(got), sorted(units[i % len(units)])), r)
            check("some share one" in r.err, "no warning about shared %ss" % how, r)

        # pscom_run_bigmask: the same where the kernel wants affinity masks
        # longer than a cpu_set_t (more than 1024 CPUs).
        launchers = (self.R, self.c("pscom_run_bigmask"))
        binds = (("hwthread", [{c} for c in subset]), ("core", cores))
        for launcher, (how, units) in itertools.product(launchers, binds):
            run_bound(taskset, launcher, how, units)
        # pscom_run_smt: where CPUs 2k and 2k+1 are the threads of one core,
        # in a set of the first such pair pscom_run may use and the CPU
        # after it, so that one core has two threads in the set.
        pairs = [c for c in mine if c % 2 == 0 and c + 1 in mine]
        if pairs:
            window = [pairs[0], pairs[0] + 1] + [c for c in mine if c > pairs[0] + 1][:1]
            smt_cores = []
            for c in window:
                core = {c & ~1, c | 1} & set(window)
                if core not in smt_cores:
                    smt_cores.append(core)
            run_bound(["taskset", "-c", ",".join(map(str, window))],
                      self.c("pscom_run_smt"), "core", smt_cores)
        else:
            print("bind_to_core: no CPUs 2k and 2k+1 both usable here: "
                  "cores of two threads not checked")
        r = launch(taskset + [self.R, "--tag-output", "-n", "2"] + show)
        expect(r, 0)
        lines = [l for l in r.out.splitlines() if "Cpus_allowed_list" in l]
        check(len(lines) == 2, "expected 2 lines", r)
        for l in lines:
            check(allowed(l) == set(subset), "an unbound process may use %s, pscom_run %s"
                  % (sorted(allowed(l)), subset), r)
        r = launch([self.R, "--bind-to", "socket", "true"])
        check(r.status == 255 and "--bind-to needs core, hwthread or none" in r.err,
              "a bad --bind-to was accepted", r)

    # PMIX_CPUSET and PMIX_LOCALITY_STRING of each process (t_locality
    # checks them against its own affinity and its peers'): bound to cores,
    # with one process more than there are cores so that two share one;
    # unbound (in pscom_run's set and in a set narrowed by taskset) neither,
    # as under mpirun.
    def locality(self):
        t = self.c("t_locality")
        n = len(os.sched_getaffinity(0)) + 1
        mine = sorted(os.sched_getaffinity(0))
        runs = [([self.R, "--bind-to", "core", "-n", str(n), t, "1", "bound"], n),
                ([self.R, "-n", "2", t, "1", "unbound"], 2),
                (["taskset", "-c", str(mine[-1]), self.R, "-n", "2", t, "1", "unbound"], 2)]
        for args, procs in runs:
            r = launch(args)
            expect(r, 0)
            ok = [l for l in r.out.splitlines() if l.startswith("locality ok ")]
            check(len(ok) == procs, "%d of %d processes said 'locality ok'"
                  % (len(ok), procs), r)
            if args[-1] == "bound":
                check(all(l.split()[2].startswith("hwloc:") for l in ok),
                      "PMIX_CPUSET is not in the library's form hwloc:LIST", r)

    def untagged_output(self):
        r = launch([self.R, "-n", "1", self.c("t_output"), "1"])
        expect(r, 0)
        check(r.out.startswith("out line one of 0:0\n") and "[" not in r.out,
              "output without --tag-output should be the program's own", r)

    # Launcher behaviour without PMIx clients.
    def launcher_errors(self):
        r = launch([self.R, "-n", "4", "/nonexistent/program"])
        expect(r, 127, max_secs=10)
        whole = "pscom_run: cannot execute '/nonexistent/program': No such file or directory"
        check(whole in r.err, "no message for exec failure", r)
        # Ranks that fail together share stderr: each one's line stays whole.
        said = [l for l in r.err.splitlines() if "cannot execute" in l]
        check(all(l.startswith(whole) and l.count("cannot execute") == 1 for l in said),
              "exec failure messages of several ranks interleaved", r)
        with tempfile.NamedTemporaryFile() as f:   # a file without execute permission
            r = launch([self.R, f.name])
            expect(r, 127, max_secs=10)
            check("cannot execute '%s': Permission denied\n" % f.name in r.err,
                  "no reason for a file that is not executable", r)
        r = launch([self.R, "--bogus", "true"])
        check(r.status == 255 and "unknown option" in r.err, "bad option accepted", r)
        r = launch([self.R, "--timeout", "1", "-n", "2", "sleep", "20"])
        expect(r, 124, max_secs=8)
        r = launch([self.R, "-n", "2", "sh", "-c", "exit 0", ":", "-n", "1", "sh", "-c",
                    "sleep 0.2; exit 5"])
        expect(r, 5, max_secs=10)

    # The end of a job whose PMIx server library does not finish:
    # pscom_run_stuck (PSCOM_TEST_STUCK): the deregistration of the
    # namespace never calls back, or PMIx_server_finalize never returns.
    def stuck_teardown(self):
        self._stuck("deregister", "stuck_deregister: called",
                    "did not finish deregistering",
                    "Terminated while the PMIx server deregistered")

    def stuck_finalize(self):
        self._stuck("finalize", "stuck_finalize: called",
                    "PMIx_server_finalize did not end within",
                    "Terminated during PMIx_server_finalize")

    # A signal that comes while the library is slow but finishes in time is
    # not lost: pscom_run still ends by it.
    def slow_teardown_signal(self):
        # Usually read after the finalize; a slow build (sanitizers) may
        # read it while the finalize still runs.
        self._stuck("slow-deregister", "stuck_deregister: called", None,
                    ("Terminated at the end of the job",
                     "Terminated during PMIx_server_finalize"))

    # Datastore requests that reach pscom_run after its last process has
    # gone (a child of it holds the connection open; pscom_run_stuck holds
    # the first request, or a lookup's answer, until the job has ended):
    # each is answered PMIX_ERR_NOT_AVAILABLE and pscom_run ends with the
    # job's status (1: exit without PMIx_Finalize). It crashed (SIGSEGV)
    # on the datastore that the end of the job had destroyed.
    def late_requests(self):
        stuck = self.c("pscom_run_stuck")
        for step, answered in (("late-publish", 5), ("late-answer", 3)):
            r = launch([stuck, "-vv", "-n", "1", self.c("t_late"), "1", "late"],
                       env={"PSCOM_TEST_STUCK": step})
            expect(r, 1, max_secs=20)
            check("late_upcall: resumed after the end of the job" in r.err,
                  "%s: no request was held until the job had ended" % step, r)
            n = len(re.findall(r": NOT_AVAILABLE \(the job has ended\)$", r.err, re.M))
            check(n == answered, "%s: %d requests answered as after the end, expected %d"
                  % (step, n, answered), r)

    # A published value that the library cannot copy: the publish fails
    # with the library's reason, and the half-made copy is destructed
    # (the publish reported NO-MEM and leaked it).
    def publish_copy_fails(self):
        r = launch([self.c("pscom_run_stuck"), "-n", "1", self.c("t_late"), "1", "status"],
                   env={"PSCOM_TEST_STUCK": "xfer-fails"})
        expect(r, 0, r"^publish status: NOT-SUPPORTED$", 1, max_secs=10)
        check("xfer_fails: the failed copy was destructed" in r.err,
              "the failed copy was not destructed", r)

    # step: PSCOM_TEST_STUCK; called: the wrapper's line; timed_out: the
    # message of a job that ends while it is stuck (None: it is only slow);
    # signalled: the message (or a tuple of messages, one of which) of a
    # SIGTERM sent once called was seen.
    def _stuck(self, step, called, timed_out, signalled):
        with tempfile.TemporaryDirectory() as tmp:
            env = {"TMPDIR": tmp, "PSCOM_TEST_STUCK": step}
            stuck = self.c("pscom_run_stuck")
            if timed_out:
                r = launch([stuck, "-n", "2", "sh", "-c", "exit 3"], env=env)
                expect(r, 3, max_secs=30)
                check(timed_out in r.err, "no message naming the step that did not end", r)
                check(called in r.err, "the stuck step was not reached", r)
            # SIGTERM while it waits for the library ends it, by that
            # signal: sent once the step was reached (the child is gone).
            t0 = time.monotonic()
            p = start([stuck, "-n", "1", "true"], env=env)
            seen = ""
            for line in p.stderr:
                seen += line
                if called in line:
                    break
            p.send_signal(signal.SIGTERM)
            r = finish(p, t0)
            r.err = seen + r.err
            check(r.status == -signal.SIGTERM,
                  "SIGTERM during the wait for the library did not end pscom_run", r)
            if isinstance(signalled, str):
                signalled = (signalled,)
            check(any(m in r.err for m in signalled), "no message naming the signal", r)
            left = os.listdir(tmp)
            check(not left, "pscom_run left %s in TMPDIR" % left, r)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    case, pscom_run, clients = sys.argv[1:]
    cases = Cases(pscom_run, clients)
    fn = getattr(cases, case, None)
    if fn is None or case.startswith("_"):
        print("unknown case %s" % case)
        return 2
    try:
        fn()
    except Fail as e:
        print("FAILED %s: %s" % (case, e))
        return 1
    print("passed %s" % case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
