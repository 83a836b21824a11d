// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * isol-meter: an operating-system latency meter with oslat's method, on libtaskisol's C ABI.
 *
 * One measuring thread per CPU of -c spins reading the TSC; every gap between two reads is
 * time the CPU was taken from it (an interrupt, another task, SMM, a hypervisor). It keeps the
 * maximum and a histogram of gaps in microseconds. Before its loop each measuring thread
 * activates the task-isolation features it was configured with (a launcher such as
 * `chisol -q vmstat_sync -I conf` configures the process and its threads inherit that), as the
 * patched oslat does; the main thread does not activate, it only waits. On a kernel without
 * the interface nothing is activated and no task-isolation prctl is issued.
 *
 *   isol-meter [-c CPULIST] [-f PRIO] [-D SECONDS] [-m MS] [-b BUCKETS] [-q] [-j]
 *
 *   -c CPULIST   measuring CPUs, e.g. 3 or 2-3,5 (default: every CPU of the affinity)
 *   -f PRIO      SCHED_FIFO priority of the measuring threads (default: keep SCHED_OTHER)
 *   -D SECONDS   how long to measure (default 10; 0: until SIGINT or SIGTERM)
 *   -m MS        every MS milliseconds, map and touch one more page in each measuring thread,
 *                kept until the end, as an application whose memory grows now and then does:
 *                a system call and a page fault that leave the CPU's vmstat counters changed,
 *                so vmstat work behind on the CPU (their own time is not counted as a gap; a
 *                page mapped and unmapped at once would leave the counters as they were)
 *   -b BUCKETS   histogram buckets of 1 us, the last one open-ended (default 32)
 *   -q           no histogram, only the summary
 *   -j           the summary as one JSON object per CPU, one a line
 *
 * It prints, once every thread runs, one line per measuring thread on stderr:
 *   isol-meter: cpu 3 tid 123 activated quiesce
 * and at the end, per CPU, the loops, the minimum, average and maximum gap and the histogram.
 * Exit status: 0, 1 for a failure before measuring (named, with its errno), 2 for bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>

#include <taskisol.h>

#define MAX_CPUS 1024

struct meter {
	int cpu;
	pid_t tid;
	int prio;
	unsigned int buckets;
	/* Set by the thread before its loop. */
	int activate_err;
	uint64_t activated;
	int setup_err;
	const char *setup_op;
	/* Results, in TSC cycles. */
	uint64_t loops;
	uint64_t allocations;
	uint64_t min;
	uint64_t max;
	uint64_t sum;
	uint64_t *hist;
	pthread_t thread;
};

static atomic_int started;
static atomic_int stop;
static double cycles_per_us;
static uint64_t cycles_per_us_int;
static uint64_t duration_cycles;
static uint64_t mem_every_cycles;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* TSC cycles per microsecond, measured against CLOCK_MONOTONIC over 100 ms. */
static double calibrate(void)
{
	uint64_t t0 = now_ns(), c0 = __rdtsc(), t1, c1;

	do
		t1 = now_ns();
	while (t1 - t0 < 100000000ull);
	c1 = __rdtsc();
	return (double)(c1 - c0) * 1000.0 / (double)(t1 - t0);
}

static void *measure(void *arg)
{
	struct meter *m = arg;
	cpu_set_t set;
	uint64_t prev, cur, gap, end = 0, b, next_mem = 0;

	m->tid = gettid();
	CPU_ZERO(&set);
	CPU_SET(m->cpu, &set);
	errno = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (errno) {
		m->setup_err = errno;
		m->setup_op = "sched_setaffinity";
		goto out;
	}
	if (m->prio > 0) {
		struct sched_param sp = { .sched_priority = m->prio };

		errno = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
		if (errno) {
			m->setup_err = errno;
			m->setup_op = "sched_setscheduler(SCHED_FIFO)";
			goto out;
		}
	}
	/*
	 * The patched oslat's client: activate what this thread was configured with (inherited
	 * from the launcher), nothing when nothing was. -EOPNOTSUPP: a kernel without the
	 * interface, where nothing is issued.
	 */
	m->activate_err = taskisol_activate_configured(&m->activated);
	atomic_fetch_add(&started, 1);

	m->min = UINT64_MAX;
	prev = __rdtsc();
	if (duration_cycles)
		end = prev + duration_cycles;
	if (mem_every_cycles)
		next_mem = prev + mem_every_cycles;
	for (;;) {
		cur = __rdtsc();
		gap = cur - prev;
		prev = cur;
		m->loops++;
		m->sum += gap;
		if (gap < m->min)
			m->min = gap;
		if (gap > m->max)
			m->max = gap;
		b = gap / cycles_per_us_int;
		if (b >= m->buckets)
			b = m->buckets - 1;
		m->hist[b]++;
		/* Checked every 1024 loops: the check is not free and the loop is the point. */
		if ((m->loops & 1023) == 0 &&
		    (atomic_load_explicit(&stop, memory_order_relaxed) || (end && cur >= end)))
			break;
		if (next_mem && cur >= next_mem) {
			char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (page != MAP_FAILED) {
				page[0] = 1;
				m->allocations++;
			}
			next_mem += mem_every_cycles;
			/* The system calls are the program's own time, not an interruption. */
			prev = __rdtsc();
		}
	}
	if (m->activated)
		taskisol_deactivate();
	return NULL;
out:
	atomic_fetch_add(&started, 1);
	return NULL;
}

/* "2-3,5" into cpus[]; returns the count, -1 on a bad list. */
static int parse_cpus(const char *s, int *cpus)
{
	int n = 0;
	char *end;

	while (*s) {
		long a = strtol(s, &end, 10), b;

		if (end == s || a < 0 || a >= MAX_CPUS)
			return -1;
		b = a;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			if (end == s + 1 || b < a || b >= MAX_CPUS)
				return -1;
			s = end;
		}
		for (; a <= b; a++) {
			if (n == MAX_CPUS)
				return -1;
			cpus[n++] = (int)a;
		}
		if (*s == ',')
			s++;
		else if (*s)
			return -1;
	}
	return n;
}

static double us(uint64_t cycles)
{
	return (double)cycles / cycles_per_us;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: isol-meter [-c CPULIST] [-f PRIO] [-D SECONDS] [-m MS] [-b BUCKETS] [-q] [-j]\n");
}

int main(int argc, char **argv)
{
	static int cpus[MAX_CPUS];
	struct meter *meters;
	int ncpus = 0, prio = 0, quiet = 0, json = 0, opt, i, err;
	double mem_ms = 0;
	unsigned int buckets = 32, b;
	double seconds = 10;
	char *end;

	while ((opt = getopt(argc, argv, "+c:f:D:m:b:qjh")) != -1) {
		switch (opt) {
		case 'c':
			ncpus = parse_cpus(optarg, cpus);
			if (ncpus <= 0) {
				fprintf(stderr, "isol-meter: -c %s: not a CPU list\n", optarg);
				return 2;
			}
			break;
		case 'f':
			prio = (int)strtol(optarg, &end, 10);
			if (*end || prio < 1 || prio > 99) {
				fprintf(stderr, "isol-meter: -f %s: not a priority 1-99\n", optarg);
				return 2;
			}
			break;
		case 'D':
			seconds = strtod(optarg, &end);
			if (*end == 's')
				end++;
			if (*end || seconds < 0) {
				fprintf(stderr, "isol-meter: -D %s: not a number of seconds\n", optarg);
				return 2;
			}
			break;
		case 'm':
			mem_ms = strtod(optarg, &end);
			if (*end || mem_ms <= 0) {
				fprintf(stderr, "isol-meter: -m %s: not a number of milliseconds\n", optarg);
				return 2;
			}
			break;
		case 'b':
			buckets = (unsigned int)strtoul(optarg, &end, 10);
			if (*end || buckets < 2 || buckets > 100000) {
				fprintf(stderr, "isol-meter: -b %s: not a count 2-100000\n", optarg);
				return 2;
			}
			break;
		case 'q':
			quiet = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!ncpus) {
		cpu_set_t set;

		if (sched_getaffinity(0, sizeof(set), &set)) {
			perror("isol-meter: sched_getaffinity");
			return 1;
		}
		for (i = 0; i < CPU_SETSIZE && ncpus < MAX_CPUS; i++)
			if (CPU_ISSET(i, &set))
				cpus[ncpus++] = i;
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	cycles_per_us = calibrate();
	cycles_per_us_int = (uint64_t)(cycles_per_us + 0.5) ?: 1;
	duration_cycles = (uint64_t)(seconds * 1e6 * cycles_per_us);
	mem_every_cycles = (uint64_t)(mem_ms * 1e3 * cycles_per_us);

	meters = calloc((size_t)ncpus, sizeof(*meters));
	if (!meters) {
		perror("isol-meter: calloc");
		return 1;
	}
	for (i = 0; i < ncpus; i++) {
		meters[i].cpu = cpus[i];
		meters[i].prio = prio;
		meters[i].buckets = buckets;
		meters[i].hist = calloc(buckets, sizeof(uint64_t));
		if (!meters[i].hist) {
			perror("isol-meter: calloc");
			return 1;
		}
		err = pthread_create(&meters[i].thread, NULL, measure, &meters[i]);
		if (err) {
			fprintf(stderr, "isol-meter: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	while (atomic_load(&started) < ncpus)
		usleep(1000);
	for (i = 0; i < ncpus; i++) {
		struct meter *m = &meters[i];

		if (m->setup_err) {
			fprintf(stderr, "isol-meter: cpu %d: %s: %s\n", m->cpu, m->setup_op,
				strerror(m->setup_err));
			atomic_store(&stop, 1);
		} else if (m->activate_err && m->activate_err != -EOPNOTSUPP) {
			fprintf(stderr, "isol-meter: cpu %d tid %d: activating the configured features: %s\n",
				m->cpu, m->tid, strerror(-m->activate_err));
		} else {
			fprintf(stderr, "isol-meter: cpu %d tid %d activated %s\n", m->cpu, m->tid,
				m->activate_err ? "nothing (no task-isolation interface)" :
				taskisol_names(m->activated, 0) ?: "?");
		}
	}
	fflush(stderr);
	err = 0;
	for (i = 0; i < ncpus; i++) {
		pthread_join(meters[i].thread, NULL);
		if (meters[i].setup_err)
			err = 1;
	}
	if (err)
		return 1;

	for (i = 0; i < ncpus; i++) {
		struct meter *m = &meters[i];
		double avg = m->loops ? us(m->sum) / (double)m->loops : 0;

		if (json) {
			printf("{\"cpu\":%d,\"tid\":%d,\"activated\":\"%s\",\"loops\":%llu,\"allocations\":%llu,"
			       "\"min_us\":%.3f,\"avg_us\":%.3f,\"max_us\":%.3f,\"hist_us\":[",
			       m->cpu, m->tid, taskisol_names(m->activated, 0) ?: "?",
			       (unsigned long long)m->loops, (unsigned long long)m->allocations,
			       us(m->min), avg, us(m->max));
			for (b = 0; b < m->buckets; b++)
				printf("%s%llu", b ? "," : "", (unsigned long long)m->hist[b]);
			printf("]}\n");
			continue;
		}
		printf("cpu %d: loops %llu min %.3f us avg %.3f us max %.3f us\n", m->cpu,
		       (unsigned long long)m->loops, us(m->min), avg, us(m->max));
		if (quiet)
			continue;
		for (b = 0; b < m->buckets; b++)
			if (m->hist[b])
				printf("  %s%03u us: %llu\n", b == m->buckets - 1 ? ">=" : "",
				       b, (unsigned long long)m->hist[b]);
	}
	return 0;
}
