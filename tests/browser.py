"""Headless Debian chromium for the report tests: a page's DOM after its scripts ran, or a screenshot."""

import subprocess


def headless(chromium, tmp_path, *args):
    profile = tmp_path / "profile"
    command = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=True, stdin=subprocess.DEVNULL
    )
