"""The dashboard's rules for user text and for a form's way back (server/ui/render.py)."""

from __future__ import annotations

import pytest

from orbit_shell.server.ui.render import back_to, visible


@pytest.mark.parametrize(
    ("back", "to"),
    [
        ("/ui/tasks/" + "a" * 32, "/ui/tasks/" + "a" * 32),
        ("/ui/keys/obj%2F%E2%82%ACuro", "/ui/keys/obj%2F%E2%82%ACuro"),
        ("/ui/keys/k%2F..%2F..%2Fqueues%3Fx%3D1%23f", "/ui/keys/k%2F..%2F..%2Fqueues%3Fx%3D1%23f"),
        ("/ui/keys/k/../../queues", "/ui/"),  # a dot segment leads elsewhere
        ("/ui/keys/obj/€uro", "/ui/"),  # decoded: not a Latin-1 header
        ("/ui/queues?x=1", "/ui/"),
        ("/ui/queues#f", "/ui/"),
        ("//evil.example/ui/", "/ui/"),
        ("https://evil.example/ui/", "/ui/"),
        ("/ui//evil", "/ui/"),
        ("", "/ui/"),
    ],
)
def test_v3_a_form_goes_back_only_to_one_of_our_encoded_pages(back, to):
    assert back_to(back) == to


def test_v1_invisible_characters_are_written_out():
    assert visible("user/\u202egnp.exe") == "user/⟨U+202E⟩gnp.exe"
    assert visible("obj/4\u200b2") == "obj/4⟨U+200B⟩2"
    assert visible("a\u2028b\u3164") == "a⟨U+2028⟩b⟨U+3164⟩"
    assert visible("invoice/7 ü José 東京") == "invoice/7 ü José 東京"
