"""Open a page in headless Chromium over the DevTools protocol: console errors, a JS probe, a screenshot.

Chromium is Debian's package (installed by .ci/run). The flags keep it off the
network: the report must render offline.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1300,2000",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError("chromium is not installed (.ci/run installs Debian's chromium)")
    return path


async def _inspect(ws_url: str, page: Path, probe: str, screenshot: Path) -> dict[str, Any]:
    errors: list[str] = []
    requests: list[str] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        next_id = 0

        async def call(method: str, **params: Any) -> dict[str, Any]:
            nonlocal next_id
            next_id += 1
            my_id = next_id
            await ws.send_json({"id": my_id, "method": method, "params": params})
            while True:
                msg = json.loads((await ws.receive()).data)
                if msg.get("method") == "Runtime.exceptionThrown":
                    errors.append(json.dumps(msg["params"]["exceptionDetails"])[:500])
                elif msg.get("method") == "Runtime.consoleAPICalled" and msg["params"]["type"] in ("error", "assert"):
                    errors.append(json.dumps(msg["params"]["args"])[:500])
                elif msg.get("method") == "Log.entryAdded" and msg["params"]["entry"]["level"] == "error":
                    errors.append(msg["params"]["entry"]["text"][:500])
                elif msg.get("method") == "Network.requestWillBeSent":
                    requests.append(msg["params"]["request"]["url"][:200])
                if msg.get("id") == my_id:
                    return msg.get("result", {})

        await call("Runtime.enable")
        await call("Log.enable")
        await call("Page.enable")
        await call("Network.enable")
        await call("Page.navigate", url=page.resolve().as_uri())
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline and state != "complete":
            state = (await call("Runtime.evaluate", expression="document.readyState"))["result"].get("value", "")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # let plotly draw
        value = (await call("Runtime.evaluate", expression=probe, returnByValue=True))["result"].get("value")
        shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    return {"errors": errors, "probe": value, "requests": requests}


def inspect_page(page: Path, probe: str, screenshot: Path) -> dict[str, Any]:
    """Load ``page``; return console/JS errors, every URL it requested, the ``probe`` value; save a screenshot."""
    # Chromium's helper processes can still be writing the profile after the main one exits: removing it then
    # failed with ENOTEMPTY about 1 run in 5 (after the page had been inspected), so leftovers are not an error.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [chromium(), *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (port_file.exists() and port_file.read_text().strip()):
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                targets = [t for t in json.load(resp) if t["type"] == "page"]
            return asyncio.run(_inspect(targets[0]["webSocketDebuggerUrl"], page, probe, screenshot))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


# For each class list: an element with those classes is added to the page, and its computed text colour and the
# first non-transparent background up its ancestors (white at the top) are read, then it is removed.
CONTRAST_PROBE = """((classLists) => classLists.map(classes => {
  const el = document.createElement('div');
  el.className = classes;
  el.textContent = 'sample';
  document.body.appendChild(el);
  const color = getComputedStyle(el).color;
  let bg = 'rgb(255, 255, 255)';
  for (let node = el; node; node = node.parentElement) {
    const b = getComputedStyle(node).backgroundColor;
    if (b && b !== 'transparent' && !b.startsWith('rgba(0, 0, 0, 0')) { bg = b; break; }
  }
  el.remove();
  return [classes, color, bg];
}))(CLASSES)"""


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2.x contrast ratio of two computed ``rgb(...)`` colours: (L1 + 0.05) / (L2 + 0.05), lighter first."""
    a, b = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def contrast_probe(class_lists: list[str]) -> str:
    return CONTRAST_PROBE.replace("CLASSES", json.dumps(class_lists))
