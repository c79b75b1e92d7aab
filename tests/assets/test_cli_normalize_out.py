"""`gymctl assets normalize --out` interrupted: the previous output is not replaced by a torn one.

Run twice, the second run's write failing part-way (here the file-size limit, as a full disk or a
kill mid-write would): the command answers output_unwritable (exit 1), yet the good PNG the first
run wrote was already truncated in place (Path.write_bytes opens the target with O_TRUNC), so the
operator is left with neither the old image nor the new one, only a torn PNG under the old name.
"""

from __future__ import annotations

import io
import resource
import signal
import subprocess

import pytest
from PIL import Image, ImageDraw

from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_a_failed_out_write_leaves_the_previous_output_whole(home_env, tmp_path):  # noqa: F811
    source = tmp_path / "logo.jpg"
    image = Image.new("RGB", (3000, 1500), (255, 255, 255))
    ImageDraw.Draw(image).ellipse((100, 100, 2900, 1400), fill=(0, 0, 200))
    image.save(source, quality=95)
    out = tmp_path / "logo.png"
    args = [
        "assets", "normalize", str(source), "--slot", "logo",
        "--transform", '{"removeBackground": true}', "--out", str(out), "--json",
    ]  # fmt: skip
    gymctl(home_env, *args)
    first = out.read_bytes()
    assert len(first) > 4096
    second = subprocess.run(
        [*GYMCTL, *args],
        env=home_env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
    )
    assert second.returncode == 1, second.stderr
    assert "output_unwritable" in second.stdout
    left = out.read_bytes()
    assert left == first, f"--out now holds {len(left)} bytes of a torn PNG"
    Image.open(io.BytesIO(left)).load()


def test_a_file_written_beside_is_written_as_by_name(tmp_path):
    """Through a symbolic link (the link stays), with an existing file's mode, a new one's from
    the umask, and a write that fails leaves nothing beside the target."""
    import os

    from gymctl.cli.output import write_file
    from gymctl.errors import DomainError

    real = tmp_path / "real.png"
    real.write_bytes(b"old")
    real.chmod(0o600)
    link = tmp_path / "link.png"
    link.symlink_to(real)

    write_file("--out", link, lambda path: path.write_bytes(b"new"))

    assert link.is_symlink()
    assert real.read_bytes() == b"new"
    assert real.stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "fresh.png"
    write_file("--out", fresh, lambda path: path.write_bytes(b"x"))
    mask = os.umask(0)
    os.umask(mask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~mask

    def fails(path):
        path.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(DomainError) as refused:
        write_file("--out", fresh, fails)
    assert refused.value.code == "output_unwritable"
    assert fresh.read_bytes() == b"x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.png", "link.png", "real.png"]
