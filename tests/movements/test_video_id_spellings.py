"""A demoted video stays rejected whatever form its link takes (spec B 3 video candidate row:
demote rejects; 4.5 ranking: discovery deduplicates against video_rejected_ids)."""

from __future__ import annotations

import pytest

from gymctl.models import Movement
from gymctl.movements.clients import video_search_from_settings
from gymctl.movements.discovery import discover
from gymctl.movements.ranking import demote, is_rejected, video_id
from tests.conftest import NOW


@pytest.mark.parametrize(
    "link",
    [
        "https://youtu.be/abcDEF12345",
        "https://www.youtube.com/shorts/abcDEF12345",
        "https://www.youtube.com/embed/abcDEF12345",
    ],
)
def test_a_demoted_youtube_video_is_not_discovered_again(session, library_settings, fake, link):
    """An operator demoted the video a person chose (the library file or a coach wrote it as a
    youtu.be / shorts / embed link). "candidates are ... deduplicated against existing
    candidates and video_rejected_ids": the same YouTube video must not come back as a fresh
    candidate (the next rank would show it again). video_id() read only a `v=` parameter, so
    the rejected id stored was the whole link and discovery added the video again."""
    row = Movement(slug="goblet-squat", name="Goblet Squat", video_url=link, video_status="manual")
    session.add(row)
    session.flush()
    demote(session, row.id, library_settings, now=NOW)
    assert row.video_url is None
    fake.videos["Goblet Squat demo"] = [("abcDEF12345", "c", 60, 1000)]
    discover(session, video_search_from_settings(library_settings), library_settings, now=NOW)
    assert [c["videoId"] for c in row.video_candidates or []] == []


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("https://www.youtube.com/watch?v=abcDEF12345&t=3", "abcDEF12345"),
        ("https://youtu.be/abcDEF12345?t=10", "abcDEF12345"),
        ("https://m.youtube.com/shorts/abcDEF12345", "abcDEF12345"),
        ("https://www.youtube-nocookie.com/embed/abcDEF12345", "abcDEF12345"),
        ("https://notyoutube.com/embed/abcDEF12345", "https://notyoutube.com/embed/abcDEF12345"),
        (
            "https://www.youtube.com/embed/videoseries?list=PL1",
            "https://www.youtube.com/embed/videoseries?list=PL1",
        ),
        ("https://www.youtube.com/watch", "https://www.youtube.com/watch"),
    ],
)
def test_a_videos_id_is_read_only_from_youtubes_own_spellings(link, expected):
    assert video_id(link) == expected


def test_a_video_rejected_under_its_whole_link_before_is_still_rejected():
    """Rows rejected before every spelling was read keep the whole link (no migration)."""
    link = "https://youtu.be/abcDEF12345"
    assert is_rejected(link, [link])
    assert is_rejected(link, ["abcDEF12345"])
    assert not is_rejected(link, ["other"])
