"""Headless Debian chromium for the report tests: a page's DOM after its scripts ran, or a screenshot."""

import subprocess

#: Headless, offline and quiet: no sandbox (containers), no GPU, no background traffic or updates.
QUIET_HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def headless(chromium, tmp_path, *args):
    profile = tmp_path / "profile"
    command = [
        str(chromium),
        *QUIET_HEADLESS,
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=True, stdin=subprocess.DEVNULL
    )


#: A script put at the end of a copy of a report page: once the episode browser shows its first page
#: (rows in its table, its "episodes 1–N of M" line) and two frames have been painted after that,
#: it writes what it saw into ``<pre id="opened">``: the page's own clock (``performance.now()``, ms
#: since navigation started) at that moment, the counts of rows, charts and tables, and the line.
OPENED_PROBE = """<script>
(function(){
  function ready(){
    const info = document.getElementById('page-info');
    const rows = document.querySelector('#episode-table tbody tr');
    return rows !== null && info !== null && / of /.test(info.textContent);
  }
  function done(){
    const out = {ms: performance.now(), info: document.getElementById('page-info').textContent,
      rows: document.querySelectorAll('#episode-table tbody tr').length,
      charts: document.querySelectorAll('svg').length, tables: document.querySelectorAll('table').length,
      status: (document.getElementById('browser-status') || {}).textContent || ''};
    const pre = document.createElement('pre'); pre.id = 'opened'; pre.textContent = JSON.stringify(out);
    document.body.append(pre);
  }
  function poll(){
    if(ready()) requestAnimationFrame(() => requestAnimationFrame(done)); else requestAnimationFrame(poll);
  }
  poll();
})();
</script>"""


def probe_copy(page):
    """A copy of the report page ``page`` (beside it, so its episodes/ folder loads) with `OPENED_PROBE`."""
    probe = page.with_name("opened-" + page.name)
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", OPENED_PROBE + "</body>"), encoding="utf-8"
    )
    return probe


def open_in_chromium(chromium, tmp_path, page, screenshot=None, timeout=120.0):
    """Open ``page`` (a probe copy: `probe_copy`) in headless chromium over the DevTools protocol.

    Returns (what `OPENED_PROBE` saw, the page's uncaught script errors and console errors); with
    ``screenshot`` (a path) also writes a PNG of the window once the page is open. Chromium starts on
    ``about:blank`` first, so its own start-up is not part of the page's clock.
    """
    import base64
    import json
    import re
    import time
    import urllib.request

    from websockets.sync.client import connect

    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    command = [
        str(chromium),
        *QUIET_HEADLESS,
        "--window-size=1200,1400",
        "--remote-debugging-port=0",
        "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + timeout
        port = None
        while port is None:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError("chromium ended before its DevTools endpoint was up")
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            port = found and int(found.group(1))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            targets = json.load(answer)
        target = next(t for t in targets if t.get("type") == "page")
        errors = []
        methods = set()
        with connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as ws:
            ids = iter(range(1, 1_000_000))

            def receive(until):
                """Messages until ``until(message)`` holds, noting the page's errors on the way."""
                while True:
                    message = json.loads(ws.recv(timeout=max(1.0, deadline - time.monotonic())))
                    params = message.get("params", {})
                    methods.add(message.get("method"))
                    if message.get("method") == "Runtime.exceptionThrown":
                        details = params["exceptionDetails"]
                        errors.append(details.get("exception", {}).get("description", details.get("text")))
                    elif message.get("method") == "Runtime.consoleAPICalled" and params["type"] == "error":
                        errors.append(
                            " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                        )
                    if until(message):
                        return message

            def call(method, **params):
                n = next(ids)
                ws.send(json.dumps({"id": n, "method": method, "params": params}))
                message = receive(lambda m: m.get("id") == n)
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

            call("Runtime.enable")
            call("Page.enable")
            call("Page.navigate", url=page.as_uri())
            if "Page.loadEventFired" not in methods:  # it may come before navigate's answer
                receive(lambda m: m.get("method") == "Page.loadEventFired")
            # Resolved by the page once the probe has written what it saw (no polling from here).
            got = call(
                "Runtime.evaluate",
                expression="new Promise(resolve => {(function wait(){"
                "const e = document.getElementById('opened');"
                " if(e) resolve(e.textContent); else requestAnimationFrame(wait);})();})",
                awaitPromise=True,
                returnByValue=True,
                timeout=int(1000 * max(1.0, deadline - time.monotonic())),
            )
            seen = json.loads(got["result"]["value"])
            if screenshot is not None:
                shot = call("Page.captureScreenshot", format="png")
                screenshot.write_bytes(base64.b64decode(shot["data"]))
        return seen, errors
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
