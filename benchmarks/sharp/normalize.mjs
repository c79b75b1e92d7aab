// The sharp (libvips) side of benchmarks/assets.py: the same asset cases as the Pillow pipeline,
// timed the same way (each run reads the input file, processes it and writes the output file).
//
//   node benchmarks/sharp/normalize.mjs INPUT CASE OUTPUT [--runs 5]
//
// CASE is one of:
//   logo_40mp_remove_background  rotate() (auto-orient), fit within 4096x4096 without enlargement,
//                                clear the background (pixels near the corner colour become
//                                transparent, edge pixels are un-mixed from it), PNG at sharp's
//                                default settings (zlib level 6, no adaptive filtering)
//   icon_2048_jpeg               rotate(), resize to 1024x1024, PNG at default settings
//   passthrough_png              read the bytes and write them unchanged
//
// Prints one JSON object: {"median_s", "runs_s", "peak_rss_mb", "output_bytes", "output_size",
// "rss_source", "sharp", "libvips", "concurrency"}. Peak RSS is this process's own, node's
// footprint included as the Pillow side includes Python's: VmHWM from /proc/self/status where
// there is one, else process.resourceUsage().maxRSS. On Linux maxRSS also carries the peak of
// the process that spawned node (the kernel keeps it across fork and exec), so a benchmark
// driver with a large heap would inflate it; VmHWM starts afresh at exec.

import { readFileSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import v8 from "node:v8";
import vm from "node:vm";
import sharp from "sharp";

// Repeated runs on the same file must not be served from libvips' operation cache.
sharp.cache(false);

// A full collection between runs (outside the timing), so that a run's 45 MB raw buffers are not
// still held by V8 when the next run starts: the peak is then one run's, as on the Python side
// where reference counting frees them at once.
v8.setFlagsFromString("--expose-gc");
const collect = globalThis.gc ?? vm.runInNewContext("gc");

const LOGO_MAX = 4096;
const ICON_SIZE = 1024;
// Background clearing, mirroring gymctl/assets/background.py so that both sides produce the same
// pixels and the comparison is about speed, memory and encoding. Distances are the largest
// per-channel difference from the corner colour (0-255): at most CLEAR is background (alpha 0,
// colour kept), from SOLID up is foreground (unchanged), in between the pixel is a blend
// c = a*f + (1-a)*bg and is un-mixed, f taken from the nearest solid pixel within NEIGHBOUR_RADIUS
// (else the colour-to-alpha extreme along c - bg), a = <c-bg, f-bg> / |f-bg|^2.
const CLEAR = 24;
const SOLID = 128;
const NEIGHBOUR_RADIUS = 3;
// Corners: the Python side averages 2x2 pixels in each corner of a 384 px sample; here the same
// area is averaged on the full-resolution pixels. All four must be opaque and agree within SPREAD.
const SAMPLE_SIDE = 384;
const SPREAD = 24;

function cornerColour(data, width, height) {
  const patch = Math.max(1, Math.round((2 * Math.max(width, height)) / SAMPLE_SIDE));
  const patches = [
    [0, 0],
    [width - patch, 0],
    [0, height - patch],
    [width - patch, height - patch],
  ];
  const means = patches.map(([x0, y0]) => {
    const sum = [0, 0, 0, 0];
    for (let y = y0; y < y0 + patch; y++) {
      for (let x = x0; x < x0 + patch; x++) {
        const i = (y * width + x) * 4;
        for (let c = 0; c < 4; c++) sum[c] += data[i + c];
      }
    }
    return sum.map((s) => s / (patch * patch));
  });
  if (means.every((m) => m[3] < 1)) return null; // already transparent: leave unchanged
  if (means.some((m) => m[3] < 254)) throw new Error("background uneven");
  for (let c = 0; c < 3; c++) {
    const values = means.map((m) => m[c]);
    if (Math.max(...values) - Math.min(...values) > SPREAD) throw new Error("background uneven");
  }
  return [0, 1, 2].map((c) => Math.round(means.reduce((s, m) => s + m[c], 0) / 4));
}

function clearBackground(data, width, height, bg) {
  const [b0, b1, b2] = bg;
  const n = width * height;
  const distance = new Uint8Array(n);
  const edge = [];
  for (let p = 0, i = 0; p < n; p++, i += 4) {
    let d = Math.abs(data[i] - b0);
    const d1 = Math.abs(data[i + 1] - b1);
    const d2 = Math.abs(data[i + 2] - b2);
    if (d1 > d) d = d1;
    if (d2 > d) d = d2;
    distance[p] = d;
    if (d <= CLEAR) data[i] = data[i + 1] = data[i + 2] = data[i + 3] = 0; // as the pipeline: no hidden colour
    else if (d < SOLID) edge.push(p);
  }
  for (const p of edge) unmix(data, distance, p, width, height, bg);
}

function unmix(data, distance, p, width, height, bg) {
  const i = p * 4;
  const y = Math.floor(p / width);
  const x = p - y * width;
  let f = null;
  for (let r = 1; r <= NEIGHBOUR_RADIUS && f === null; r++) {
    for (let dy = -r; dy <= r && f === null; dy++) {
      for (let dx = -r; dx <= r; dx++) {
        if (Math.max(Math.abs(dx), Math.abs(dy)) !== r) continue;
        const ny = y + dy;
        const nx = x + dx;
        if (ny < 0 || ny >= height || nx < 0 || nx >= width) continue;
        const q = ny * width + nx;
        if (distance[q] >= SOLID) {
          f = [data[q * 4], data[q * 4 + 1], data[q * 4 + 2]];
          break;
        }
      }
    }
  }
  const delta = [data[i] - bg[0], data[i + 1] - bg[1], data[i + 2] - bg[2]];
  if (f === null) {
    let a = 0;
    for (let c = 0; c < 3; c++) {
      const room = delta[c] > 0 ? 255 - bg[c] : bg[c];
      a = Math.max(a, Math.abs(delta[c]) / Math.max(room, 1));
    }
    a = Math.min(1, Math.max(1e-3, a));
    f = delta.map((d, c) => Math.min(255, Math.max(0, bg[c] + d / a)));
  }
  let dot = 0;
  let norm = 0;
  for (let c = 0; c < 3; c++) {
    const dir = f[c] - bg[c];
    dot += delta[c] * dir;
    norm += dir * dir;
  }
  const alpha = Math.min(1, Math.max(0, dot / Math.max(norm, 1)));
  data[i] = Math.round(f[0]);
  data[i + 1] = Math.round(f[1]);
  data[i + 2] = Math.round(f[2]);
  data[i + 3] = Math.round(data[i + 3] * alpha);
}

async function logoRemoveBackground(input, output) {
  const { data, info } = await sharp(input)
    .rotate()
    .resize(LOGO_MAX, LOGO_MAX, { fit: "inside", withoutEnlargement: true })
    .ensureAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  const bg = cornerColour(data, info.width, info.height);
  if (bg !== null) clearBackground(data, info.width, info.height, bg);
  const out = await sharp(data, {
    raw: { width: info.width, height: info.height, channels: 4 },
  })
    .png()
    .toBuffer({ resolveWithObject: true });
  await writeFile(output, out.data);
  return { bytes: out.info.size, size: [out.info.width, out.info.height] };
}

async function icon(input, output) {
  const out = await sharp(input)
    .rotate()
    .resize(ICON_SIZE, ICON_SIZE)
    .png()
    .toBuffer({ resolveWithObject: true });
  await writeFile(output, out.data);
  return { bytes: out.info.size, size: [out.info.width, out.info.height] };
}

async function passthrough(input, output) {
  const bytes = await readFile(input);
  await writeFile(output, bytes);
  const meta = await sharp(bytes).metadata(); // header only, for output_size
  return { bytes: bytes.length, size: [meta.width, meta.height] };
}

const CASES = {
  logo_40mp_remove_background: logoRemoveBackground,
  icon_2048_jpeg: icon,
  passthrough_png: passthrough,
};

function peakRss() {
  try {
    const status = readFileSync("/proc/self/status", "utf8");
    const line = status.split("\n").find((l) => l.startsWith("VmHWM:"));
    if (line) return { mb: Number.parseInt(line.split(/\s+/)[1], 10) / 1024, source: "VmHWM" };
  } catch {
    // not Linux: fall through
  }
  return { mb: process.resourceUsage().maxRSS / 1024, source: "maxRSS" }; // both in KiB
}

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

async function main(argv) {
  const positional = [];
  let runs = 5;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--runs") runs = Number.parseInt(argv[++i], 10);
    else positional.push(argv[i]);
  }
  const [input, caseName, output] = positional;
  const run = CASES[caseName];
  if (!input || !output || !run || !(runs >= 1)) {
    console.error(
      `usage: node normalize.mjs INPUT CASE OUTPUT [--runs N]; CASE: ${Object.keys(CASES).join(", ")}`,
    );
    return 2;
  }
  const times = [];
  let last;
  for (let i = 0; i < runs; i++) {
    collect();
    // The file path (not a buffer) for the image cases: libvips reads the file itself, as an
    // ordinary sharp program does; the Pillow side reads the file into bytes inside its timing.
    const start = performance.now();
    last = await run(input, output);
    times.push((performance.now() - start) / 1000);
  }
  const rss = peakRss();
  const result = {
    median_s: Number(median(times).toFixed(4)),
    runs_s: times.map((t) => Number(t.toFixed(4))),
    peak_rss_mb: Number(rss.mb.toFixed(1)),
    rss_source: rss.source,
    output_bytes: last.bytes,
    output_size: last.size,
    sharp: sharp.versions.sharp,
    libvips: sharp.versions.vips,
    concurrency: sharp.concurrency(),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
