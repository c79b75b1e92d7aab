"""The asset pipeline's figures: gymctl.assets.pipeline against sharp (libvips).

Three cases (issue 5, "Figures"):
  logo_40mp_remove_background  a 7745x5164 (just under 40 MP) photo-like JPEG logo, quality 90
                               -> slot logo with removeBackground
  icon_2048_jpeg               a 2048x2048 JPEG -> icon (no transform)
  passthrough_png              a 1024x1024 opaque icon PNG -> icon, stored byte for byte
                               (the pipeline's report must say passthrough: true)

The inputs are generated once, deterministically (numpy + Pillow), into a temporary folder. Each
case then runs in a fresh process, once with gymctl's pipeline (this script with `--child`;
Pillow, and libvips through pyvips for JPEG logos) and, when `node` is present, once with sharp
(`benchmarks/sharp/normalize.mjs`). A run reads the input file,
processes it and writes the output file; each process does 5 runs and reports the median wall
time and its own peak RSS (VmHWM from /proc/self/status for Python, process.resourceUsage().maxRSS
for node), so each figure covers one case and includes the runtime's own footprint. sharp's
node_modules are installed with `npm ci --prefix benchmarks/sharp` when missing; if node, npm or
sharp is unavailable the sharp figures are null and gymctl's figures are printed anyway.

Goals: (a) gymctl within 1.5x of sharp's wall time, peak RSS under 400 MB, output no larger than
1.1x sharp's; (b) within 1.5x of sharp's wall time. This script only measures and reports (JSON
on stdout); it asserts nothing about timing.

    .venv/bin/python benchmarks/assets.py [--runs 5] [--case NAME ...] [--no-sharp] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARP_DIR = Path(__file__).resolve().parent / "sharp"
SHARP_SCRIPT = SHARP_DIR / "normalize.mjs"
CHILD_TIMEOUT_S = 300

CASES: dict[str, dict[str, Any]] = {
    "logo_40mp_remove_background": {
        "input": "logo_7745x5164_q90.jpg",
        "slot": "logo",
        "transform": {"removeBackground": True},
    },
    "icon_2048_jpeg": {"input": "icon_2048_q90.jpg", "slot": "icon", "transform": {}},
    "passthrough_png": {"input": "icon_1024_opaque.png", "slot": "icon", "transform": {}},
}

GOAL_LOGO_WALL = 1.5
GOAL_LOGO_RSS_MB = 400
GOAL_LOGO_BYTES = 1.1
GOAL_ICON_WALL = 1.5


# --- inputs ------------------------------------------------------------------------------------


def _coverage(sdf):  # type: ignore[no-untyped-def]
    """Anti-aliased coverage (0..1) of a shape from its signed distance in pixels (inside < 0)."""
    import numpy as np

    return np.clip(0.5 - sdf, 0.0, 1.0)


def _rounded_box_sdf(xx, yy, cx, cy, half_w, half_h, radius):  # type: ignore[no-untyped-def]
    import numpy as np

    qx = np.abs(xx - cx) - (half_w - radius)
    qy = np.abs(yy - cy) - (half_h - radius)
    outside = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0))
    return outside + np.minimum(np.maximum(qx, qy), 0) - radius


def make_logo_jpeg(path: Path, width: int = 7745, height: int = 5164) -> None:
    """A flat light background, a dark anti-aliased logo (a ring and three rounded bars) and a
    little Gaussian noise everywhere, so the JPEG looks like a photographed print. Built in row
    bands to keep the generator's memory modest."""
    import numpy as np
    from PIL import Image

    background = np.array([244, 242, 237], dtype=np.float32)
    ink = np.array([28, 52, 104], dtype=np.float32)
    rng = np.random.default_rng(20240501)
    out = np.empty((height, width, 3), dtype=np.uint8)
    xs = np.arange(width, dtype=np.float32)[None, :]
    ring_cx, ring_cy = width * 0.28, height * 0.5
    r_out, r_in = height * 0.30, height * 0.19
    bars = [
        (width * 0.68, height * (0.5 + dy), width * 0.17, height * 0.045, height * 0.045)
        for dy in (-0.16, 0.0, 0.16)
    ]
    band = 256
    for y0 in range(0, height, band):
        y1 = min(height, y0 + band)
        ys = np.arange(y0, y1, dtype=np.float32)[:, None]
        dist = np.hypot(xs - ring_cx, ys - ring_cy)
        ring = np.maximum(dist - r_out, r_in - dist)  # inside the annulus < 0
        shape = ring
        for cx, cy, hw, hh, rad in bars:
            shape = np.minimum(shape, _rounded_box_sdf(xs, ys, cx, cy, hw, hh, rad))
        cover = _coverage(shape)[..., None]
        pixels = background * (1.0 - cover) + ink * cover
        pixels += rng.standard_normal(pixels.shape, dtype=np.float32) * 2.0
        out[y0:y1] = np.clip(pixels + 0.5, 0, 255).astype(np.uint8)
    Image.fromarray(out, "RGB").save(path, "JPEG", quality=90)


def make_icon(size: int, *, noise: float) -> Any:
    """An opaque app icon: an orange field with a white anti-aliased rounded square and a dot."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(size)
    field = np.array([232, 93, 36], dtype=np.float32)
    white = np.array([252, 250, 246], dtype=np.float32)
    ys = np.arange(size, dtype=np.float32)[:, None]
    xs = np.arange(size, dtype=np.float32)[None, :]
    c = size / 2
    frame = _rounded_box_sdf(xs, ys, c, c, size * 0.30, size * 0.30, size * 0.08)
    hole = -_rounded_box_sdf(xs, ys, c, c, size * 0.22, size * 0.22, size * 0.04)
    dot = np.hypot(xs - c, ys - c) - size * 0.08
    shape = np.minimum(np.maximum(frame, hole), dot)
    cover = _coverage(shape)[..., None]
    pixels = field * (1.0 - cover) + white * cover
    if noise:
        pixels += rng.standard_normal(pixels.shape, dtype=np.float32) * noise
    return Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8), "RGB")


def make_inputs(folder: Path) -> dict[str, float]:
    """Write the three inputs; returns the seconds each took (for the record)."""
    took = {}
    start = time.perf_counter()
    make_logo_jpeg(folder / CASES["logo_40mp_remove_background"]["input"])
    took["logo_40mp_remove_background"] = time.perf_counter() - start
    start = time.perf_counter()
    make_icon(2048, noise=2.0).save(folder / CASES["icon_2048_jpeg"]["input"], "JPEG", quality=90)
    took["icon_2048_jpeg"] = time.perf_counter() - start
    start = time.perf_counter()
    make_icon(1024, noise=0).save(folder / CASES["passthrough_png"]["input"], "PNG")
    took["passthrough_png"] = time.perf_counter() - start
    return took


# --- the gymctl side: one case in this (fresh) process ------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024


def child(case: str, source: Path, output: Path, runs: int) -> int:
    from gymctl.assets.pipeline import normalize
    from gymctl.assets.types import Slot, Transform

    spec = CASES[case]
    slot = Slot(spec["slot"])
    transform = Transform.from_dict(spec["transform"], slot)
    times: list[float] = []
    last: dict[str, Any] = {}
    for _ in range(runs):
        start = time.perf_counter()
        data = source.read_bytes()
        result = normalize(data, slot, transform)
        output.write_bytes(result.png)
        times.append(time.perf_counter() - start)
        last = {
            "output_bytes": len(result.png),
            "output_size": [result.width, result.height],
            "report": result.report,
        }
        del data, result  # one run's buffers at a time
    print(
        json.dumps(
            {
                "median_s": round(statistics.median(times), 4),
                "runs_s": [round(t, 4) for t in times],
                "peak_rss_mb": round(peak_rss_mb(), 1),
                **last,
            },
            default=str,
        )
    )
    return 0


# --- running the cases ------------------------------------------------------------------------


def run_json(command: list[str], *, cwd: Path = ROOT) -> tuple[dict[str, Any] | None, str | None]:
    """Run one measuring process; its last stdout line is JSON. Returns (result, error)."""
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return None, f"exit {done.returncode}: " + " | ".join(tail)
    try:
        return json.loads(lines[-1]), None
    except ValueError:
        return None, f"not JSON: {lines[-1][:200]}"


def gymctl_case(case: str, folder: Path, runs: int) -> tuple[dict[str, Any] | None, str | None]:
    source = folder / CASES[case]["input"]
    output = folder / f"{case}.gymctl.png"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", case, str(source)]
    return run_json([*command, str(output), "--runs", str(runs)])


def sharp_case(case: str, folder: Path, runs: int) -> tuple[dict[str, Any] | None, str | None]:
    source = folder / CASES[case]["input"]
    output = folder / f"{case}.sharp.png"
    node = shutil.which("node") or "node"
    return run_json([node, str(SHARP_SCRIPT), str(source), case, str(output), "--runs", str(runs)])


def sharp_ready() -> tuple[bool, str | None]:
    """node present and sharp installed (npm ci when node_modules is missing)."""
    if shutil.which("node") is None:
        return False, "node is not on PATH"
    if not (SHARP_DIR / "node_modules" / "sharp" / "package.json").is_file():
        npm = shutil.which("npm")
        if npm is None:
            return False, "sharp is not installed and npm is not on PATH"
        try:
            done = subprocess.run(
                [npm, "ci", "--prefix", str(SHARP_DIR), "--no-audit", "--no-fund"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"npm ci failed: {exc}"
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            return False, f"npm ci failed (exit {done.returncode}): {tail}"
    load = "import('sharp').then(s => console.log(JSON.stringify(s.default.versions)))"
    check, error = run_json([shutil.which("node") or "node", "-e", load], cwd=SHARP_DIR)
    if check is None:
        return False, f"sharp does not load: {error}"
    return True, None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return round(a / b, 3)


def compare(gymctl: dict[str, Any] | None, sharp: dict[str, Any] | None) -> dict[str, Any] | None:
    if gymctl is None or sharp is None:
        return None
    return {
        "wall_time": ratio(gymctl["median_s"], sharp["median_s"]),
        "peak_rss": ratio(gymctl["peak_rss_mb"], sharp["peak_rss_mb"]),
        "output_bytes": ratio(gymctl["output_bytes"], sharp["output_bytes"]),
    }


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def goals(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    logo = cases.get("logo_40mp_remove_background", {})
    icon = cases.get("icon_2048_jpeg", {})
    logo_ratios = logo.get("ratios") or {}
    icon_ratios = icon.get("ratios") or {}
    logo_rss = (logo.get("gymctl") or {}).get("peak_rss_mb")
    result = {
        "logo_wall_time_within_1_5x_sharp": at_most(logo_ratios.get("wall_time"), GOAL_LOGO_WALL),
        "logo_peak_rss_under_400_mb": None if logo_rss is None else logo_rss < GOAL_LOGO_RSS_MB,
        "logo_output_bytes_within_1_1x_sharp": at_most(
            logo_ratios.get("output_bytes"), GOAL_LOGO_BYTES
        ),
        "icon_wall_time_within_1_5x_sharp": at_most(icon_ratios.get("wall_time"), GOAL_ICON_WALL),
    }
    known = [v for v in result.values() if v is not None]
    result["all_met"] = bool(known) and len(known) == len(result) and all(known)
    return result


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine(sharp_info: dict[str, Any], load_before: float) -> dict[str, Any]:
    from PIL import features

    memory_mb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = int(line.split()[1]) // 1024
    except OSError:
        pass
    node = None
    if shutil.which("node"):
        done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
        node = done.stdout.strip() or None
    return {
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "memory_mb": memory_mb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pillow": version("pillow"),
        "pyvips": version("pyvips"),
        "libvips_pyvips_binary": version("pyvips-binary"),
        "numpy": version("numpy"),
        "zlib": features.version("zlib"),
        "libjpeg_turbo": features.version("libjpeg_turbo"),
        "node": node,
        "sharp": sharp_info,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case and side (median)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="repeatable")
    parser.add_argument("--no-sharp", action="store_true", help="gymctl figures only")
    parser.add_argument("--keep", type=Path, help="generate inputs and outputs here and keep them")
    parser.add_argument(
        "--child", nargs=3, metavar=("CASE", "INPUT", "OUTPUT"), help=argparse.SUPPRESS
    )
    parser.add_argument("--generate", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.child:
        case, source, output = args.child
        return child(case, Path(source), Path(output), args.runs)
    if args.generate:
        print(json.dumps({k: round(v, 2) for k, v in make_inputs(args.generate).items()}))
        return 0

    selected = args.case or list(CASES)
    load_before = os.getloadavg()[0]  # other work on the machine shifts both sides' figures
    if args.no_sharp:
        use_sharp, sharp_error = False, "--no-sharp"
    else:
        use_sharp, sharp_error = sharp_ready()

    with tempfile.TemporaryDirectory(prefix="gymctl-bench-assets-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        # In a child too: this process stays small, so nothing it spawns inherits a large
        # peak RSS (on Linux ru_maxrss survives fork and exec; VmHWM does not).
        generated, error = run_json(
            [sys.executable, str(Path(__file__).resolve()), "--generate", str(folder)]
        )
        if generated is None:
            print(json.dumps({"error": f"generating the inputs failed: {error}"}))
            return 1
        cases: dict[str, dict[str, Any]] = {}
        sharp_versions: dict[str, Any] = {}
        for case in selected:
            gymctl, gymctl_error = gymctl_case(case, folder, args.runs)
            sharp = None
            entry: dict[str, Any] = {
                "input": {
                    "file": CASES[case]["input"],
                    "bytes": (folder / CASES[case]["input"]).stat().st_size,
                    "slot": CASES[case]["slot"],
                    "transform": CASES[case]["transform"],
                },
                "gymctl": gymctl,
            }
            if gymctl_error:
                entry["gymctl_error"] = gymctl_error
            if use_sharp:
                sharp, error = sharp_case(case, folder, args.runs)
                if error:
                    entry["sharp_error"] = error
                elif sharp is not None:
                    for key in ("sharp", "libvips", "concurrency"):
                        sharp_versions[key] = sharp.pop(key, None)
            entry["sharp"] = sharp
            entry["ratios"] = compare(gymctl, sharp)
            cases[case] = entry

    sharp_info: dict[str, Any] = {"available": use_sharp}
    if use_sharp:
        sharp_info.update(sharp_versions)
    else:
        sharp_info["reason"] = sharp_error
    report = {
        "cases": cases,
        "goals": goals(cases),
        "runs_per_case": args.runs,
        "inputs_generated_s": generated,
        "machine": machine(sharp_info, load_before),
    }
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
