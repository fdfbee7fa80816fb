// The Node side of `examples/loop_lag.rs`: the same loop (busy-blocking itself for B ms
// every E ms) under `perf_hooks.monitorEventLoopDelay`, the same flags, the same JSON line.
//
//   node examples/loop_lag.js --block-ms 50 --every-ms 200 --secs 10 --resolution-ms 10 --json
//
// Node's histogram records the time between its timer's firings, the resolution included
// (idle at 10 ms its p50 reads about 10.15 ms): the figures printed are Node's own, so
// compare them with loopguard's lateness less the resolution. `probe_cpu_ms_per_s` is
// null: the histogram lives in native code and its CPU cannot be told apart from the rest
// of the process; `process_cpu_ms_per_s` is `process.cpuUsage()` (getrusage: user + system)
// per second of wall time. `--resolution-ms 0` runs the loop without the histogram: the
// process's baseline.
'use strict';

const { monitorEventLoopDelay, performance } = require('node:perf_hooks');

const USAGE =
  'usage: node loop_lag.js [--block-ms B] [--every-ms E] [--secs S] [--resolution-ms R] [--json]';

function parse(argv) {
  const args = { block: 0, every: 200, secs: 10, resolution: 10, json: false };
  const names = {
    '--block-ms': 'block',
    '--every-ms': 'every',
    '--secs': 'secs',
    '--resolution-ms': 'resolution',
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--json') {
      args.json = true;
      continue;
    }
    const value = Number(argv[++i]);
    if (!(flag in names) || !Number.isInteger(value) || value < 0) {
      console.error(`bad or unknown flag ${flag}\n${USAGE}`);
      process.exit(2);
    }
    args[names[flag]] = value;
  }
  if ((args.block > 0 && args.every === 0) || args.secs === 0) {
    console.error(`--every-ms and --secs must be positive\n${USAGE}`);
    process.exit(2);
  }
  return args;
}

// Holds the loop for `ms` milliseconds, spinning: the loop's blocking work.
function busy(ms) {
  const end = performance.now() + ms;
  while (performance.now() < end) {}
}

const round = (x) => Math.round(x * 1e3) / 1e3;

const args = parse(process.argv.slice(2));
const histogram =
  args.resolution > 0 ? monitorEventLoopDelay({ resolution: args.resolution }) : null;
const blocker = args.block > 0 ? setInterval(() => busy(args.block), args.every) : null;

const cpuBefore = process.cpuUsage();
const began = process.hrtime.bigint();
if (histogram) histogram.enable();

setTimeout(() => {
  if (histogram) histogram.disable();
  const cpu = process.cpuUsage(cpuBefore);
  const wallSecs = Number(process.hrtime.bigint() - began) / 1e9;
  if (blocker) clearInterval(blocker);
  const ms = (ns) => (histogram ? round(ns / 1e6) : null);
  const line = JSON.stringify({
    p50_ms: ms(histogram && histogram.percentile(50)),
    p99_ms: ms(histogram && histogram.percentile(99)),
    max_ms: ms(histogram && histogram.max),
    samples: histogram ? histogram.count : 0,
    probe_cpu_ms_per_s: null,
    process_cpu_ms_per_s: round((cpu.user + cpu.system) / 1e3 / wallSecs),
  });
  if (args.json) {
    console.log(line);
  } else {
    console.log(
      `node monitorEventLoopDelay, resolution ${args.resolution} ms, blocking ${args.block} ms every ${args.every} ms for ${args.secs} s: ${line}`,
    );
  }
}, args.secs * 1000);
