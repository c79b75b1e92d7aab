"""What the command line prints is text, never rich markup: "[dry run]" after a dry run's
outcome and "[truncated]" in a table's title vanished as unknown tags (the operator read a dry
run as done), and so would a member's "[Tue] morning" in a cell."""

from __future__ import annotations

from gymctl.cli import output
from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_a_table_shows_brackets_in_its_title_and_cells():
    with output.console.capture() as captured:
        output.render_rows(
            [{"name": "[Tue] morning", "note": "[bold]x[/bold]"}],
            ["name", "note"],
            title="charges of demo-gym [truncated]",
        )
    shown = captured.get()
    assert "[truncated]" in shown
    assert "[Tue] morning" in shown
    assert "[bold]x[/bold]" in shown


def test_a_dry_run_says_so_in_text(home_env):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    told = gymctl(
        home_env,
        "legal",
        "publish",
        "privacy_policy",
        "2027-03",
        "https://demo-gym.example/p",
        "--operator",
        "user_demo_owner",
        "--published-at",
        "2027-03-01T00:00:00Z",
        "--dry-run",
    )
    assert "[dry run: nothing kept]" in " ".join(told.stdout.split())  # wrapped at 80 columns
