"""A real browser on the WebSocket face, for wsbridge's tests: Debian's headless Chromium driven
by Selenium (PyPI) through Debian's chromium-driver. It serves one page from two local origins
(two ports on 127.0.0.1) and loads it from each; the page opens `new WebSocket(URL)` and shows
what comes, as a page of an app's would.

Usage: browser_app.py COUNT. Prints `origins ALLOWED REFUSED` (the two origins, so the test can
configure local.websocket.allowed_origins), then reads the face's URL from stdin and goes on:
then for the allowed origin `feed N` (the number of messages the page showed, once it has COUNT)
and `first TEXT`, and for the other `refused CODE` (the close the page saw, 1006 for a refused
handshake) or `opened` if it was let in. `error TEXT` for anything that failed (exit 1).
"""

import http.server
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PAGE = """<!doctype html>
<html><body>
<div id="state">connecting</div>
<pre id="feed"></pre>
<script>
  const params = new URLSearchParams(location.search);
  const ws = new WebSocket(params.get("ws"));
  const feed = document.getElementById("feed");
  const state = document.getElementById("state");
  let count = 0;
  ws.onopen = () => { state.textContent = "open"; };
  ws.onmessage = (event) => {
    count += 1;
    feed.textContent += event.data + "\\n";
    state.dataset.count = count;
  };
  ws.onclose = (event) => { state.textContent = "closed " + event.code; };
</script>
</body></html>
"""


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def out(line):
    print(line, flush=True)


def serve():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def main(count):
    allowed, refused = serve(), serve()
    out(f"origins {allowed} {refused}")
    url = sys.stdin.readline().strip()
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(f"{allowed}/?ws={url}")
        wait = WebDriverWait(driver, 60, poll_frequency=0.1)
        state = driver.find_element(By.ID, "state")
        wait.until(lambda _: int(state.get_attribute("data-count") or 0) >= count)
        lines = driver.find_element(By.ID, "feed").text.splitlines()
        out(f"feed {len(lines)}")
        out(f"first {lines[0]}")
        driver.get(f"{refused}/?ws={url}")
        state = driver.find_element(By.ID, "state")
        wait.until(lambda _: state.text != "connecting")
        out(f"refused {state.text.removeprefix('closed ')}" if state.text.startswith("closed") else state.text)
    finally:
        driver.quit()


if __name__ == "__main__":
    try:
        main(int(sys.argv[1]))
    except Exception as error:
        out(f"error {type(error).__name__}: {error}")
        sys.exit(1)
