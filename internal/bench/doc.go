// Package bench holds the workloads behind `govfs bench`.
//
// The meta workload (RunMeta) measures the metadata service through the
// public client library. It makes a fresh top directory /bench-<random>
// with one directory w<k> per worker, then runs its phases one after
// another; within a phase all workers run in parallel and every operation
// is timed on its own:
//
//	mkdir    N directories d<i> per worker (MkdirAt, mode 0755)
//	create   N files f<i> per worker (CreateAt, exclusive, mode 0644)
//	stat     GetAttr on the worker's N file inodes, 4 passes (4N ops per
//	         worker) so that the phase, by far the cheapest, runs long
//	         enough to measure
//	readdir  ReaddirAll of the worker's own directory 10 times; an op is
//	         one full listing (entries/s is reported beside it)
//	rename   f<i> → g<i> within the worker's directory (RenameAt)
//	unlink   unlink every file, then rmdir every d<i>; both count as ops
//	         of this phase (2N ops per worker when mkdir ran)
//
// Phases not asked for but needed by one that is (create before stat,
// readdir, rename or unlink) run first as untimed setup. Any failed
// operation fails the run after its phase. Ops/s is a phase's operations
// over its wall time; p50 and p99 are nearest-rank percentiles of the
// single-operation latencies.
package bench
