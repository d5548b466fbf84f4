#!/usr/bin/env python3
"""cdp_chat.py -- drive the chat page in headless Chromium over the DevTools protocol (stdlib only).

    cdp_chat.py CHROMIUM BASE_URL API_KEY SCREENSHOT.png

Chromium runs with --remote-debugging-pipe (CDP messages are NUL-terminated JSON on fds 3/4, so
no WebSocket client is needed). The script:
  1. opens BASE_URL/ on a server that requires API_KEY: the page must ask for the key;
  2. types the key, then a message into the text box and presses Enter (real input events);
  3. waits until the streamed answer is complete, checks it holds words and that tokens/s shows;
  4. opens BASE_URL/?q=... (the key is remembered for the session): the page sends it by itself;
  5. with THINK_URL set (a server with --reasoning-parser deepseek_r1 on DeepSeek-R1's template, no key): opens
     THINK_URL/?q=...&thinking=on: the reasoning streams into the message's "thinking" block (the demo model never
     closes it, so all of the output is thinking and the answer is empty);
  6. saves a screenshot (PNG) of the conversation.
Prints what it saw and "PASS", or the reason and exits 1. Exit 77 if Chromium cannot start.
"""
import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

DEADLINE_S = 120


class Cdp:
    def __init__(self, chromium, profile):
        to_chrome = os.pipe()
        from_chrome = os.pipe()
        # park the child's ends on high fds so the dup2 onto 3/4 cannot clobber one with the other
        self.c_read = fcntl.fcntl(to_chrome[0], fcntl.F_DUPFD, 100)
        self.c_write = fcntl.fcntl(from_chrome[1], fcntl.F_DUPFD, 100)
        os.close(to_chrome[0])
        os.close(from_chrome[1])
        self.w, self.r = to_chrome[1], from_chrome[0]
        c_read, c_write = self.c_read, self.c_write

        def child():
            os.dup2(c_read, 3)
            os.dup2(c_write, 4)

        args = [chromium, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--user-data-dir=" + profile, "--window-size=1000,760", "about:blank"]
        self.proc = subprocess.Popen(args, preexec_fn=child, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(profile, "chromium.log"), "wb"))
        os.close(c_read)
        os.close(c_write)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _read_msg(self, deadline):
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no message from chromium")
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited with %s" % self.proc.returncode)
            import select
            rd, _, _ = select.select([self.r], [], [], 0.5)
            if rd:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, timeout=30, session=True):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_msg(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read_msg(deadline))

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page script: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def wait_for(self, expr, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.eval(expr):
                return
            time.sleep(0.1)
        raise TimeoutError("timed out waiting for " + what)

    def press_enter(self):
        for t in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": t, "key": "Enter", "code": "Enter",
                                                 "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13,
                                                 **({"text": "\r"} if t == "keyDown" else {})})

    def type_into(self, element_id, text):
        self.eval("document.getElementById(%s).focus()" % json.dumps(element_id))
        self.call("Input.insertText", {"text": text})


PAGE_STATE = """(() => {
  const q = (s) => Array.from(document.querySelectorAll(s)).map((e) => e.textContent);
  return { user: q('.msg.user'), assistant: q('.msg.assistant'), errors: q('.msg.error'),
           stats: document.getElementById('stats').textContent, model: document.getElementById('model').textContent,
           state: document.body.dataset.state,
           keyShown: document.getElementById('keyrow').classList.contains('shown') };
})()"""


def check_answer(st, n, fails):
    if len(st["assistant"]) < n:
        fails.append("%d assistant messages, expected %d" % (len(st["assistant"]), n))
        return
    text = st["assistant"][n - 1]
    if not re.search(r"[A-Za-z]{2,}", text) or text == "(no text)":
        fails.append("answer %d has no words: %r" % (n, text))
    if not re.search(r"\d+ tokens, [0-9.]+ tok/s", st["stats"]):
        fails.append("no tokens/s in the status: %r" % st["stats"])


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    chromium, base, key, shot = sys.argv[1:]
    profile = tempfile.mkdtemp(prefix="sits-chromium-")
    fails = []
    try:
        try:
            cdp = Cdp(chromium, profile)
            targets = cdp.call("Target.getTargets", session=False, timeout=30)["targetInfos"]
        except Exception as e:
            print("SKIP: chromium does not start headless here: %s" % e)
            try:
                print(open(os.path.join(profile, "chromium.log")).read()[-2000:])
            except OSError:
                pass
            return 77
        try:
            page = next(t for t in targets if t["type"] == "page")
            cdp.session = cdp.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                   session=False)["sessionId"]
            cdp.call("Page.enable")
            cdp.call("Runtime.enable")

            # 1. the page loads without a key and asks for one (the server answers /v1/models with 401)
            cdp.call("Page.navigate", {"url": base + "/"})
            cdp.wait_event("Page.loadEventFired")
            cdp.wait_for("document.getElementById('keyrow').classList.contains('shown')", "the API key prompt", 20)
            print("page loaded; it asks for the API key")
            # 2. key, then a message typed and sent with Enter
            cdp.type_into("key", key)
            cdp.eval("document.getElementById('keysave').click()")
            cdp.wait_for("!/connecting|key needed|unreachable/.test(document.getElementById('model').textContent)",
                         "the model name", 20)
            cdp.eval("document.getElementById('temp').value = '0'")   # greedy: the same answer every run
            cdp.type_into("input", "What is a Python list?")
            cdp.press_enter()
            cdp.wait_for("document.querySelectorAll('.msg.assistant').length >= 1 && "
                         "document.body.dataset.state === 'idle'", "the first streamed answer", 90)
            st = cdp.eval(PAGE_STATE)
            print("model: %s\nuser: %s\nassistant: %r\nstats: %s" % (st["model"], st["user"], st["assistant"][-1:],
                                                                   st["stats"]))
            check_answer(st, 1, fails)
            if st["errors"]:
                fails.append("error messages on the page: %r" % st["errors"])
            # 3. /?q=...: sent by the page itself (key remembered in sessionStorage)
            cdp.call("Page.navigate", {"url": base + "/?q=How%20do%20I%20open%20a%20file%3F&temperature=0&max_tokens=48"})
            cdp.wait_event("Page.loadEventFired")
            cdp.wait_for("document.querySelectorAll('.msg.user').length === 1 && "
                         "document.querySelectorAll('.msg.assistant').length === 1 && "
                         "document.body.dataset.state === 'idle'", "the ?q= answer", 90)
            st = cdp.eval(PAGE_STATE)
            print("?q= user: %s\n?q= assistant: %r\n?q= stats: %s" % (st["user"], st["assistant"], st["stats"]))
            if st["user"] != ["How do I open a file?"]:
                fails.append("?q= message: %r" % st["user"])
            check_answer(st, 1, fails)
            # 5. [reasoning] the thinking block
            think_url = os.environ.get("THINK_URL")
            if think_url:
                cdp.call("Page.navigate", {"url": think_url + "/?q=Hello&temperature=0&max_tokens=24&thinking=on"})
                cdp.wait_event("Page.loadEventFired")
                cdp.wait_for("document.querySelectorAll('.msg.assistant').length === 1 && "
                             "document.body.dataset.state === 'idle'", "the thinking answer", 90)
                th = cdp.eval("(() => { const d = document.querySelector('.msg.assistant details.thinking'); "
                              "return d ? { text: d.lastChild.textContent, summary: d.firstChild.textContent, "
                              "answer: document.querySelector('.msg.assistant > span').textContent, "
                              "errors: document.querySelectorAll('.msg.error').length } : null; })()")
                print("thinking: %r" % th)
                if not th or not re.search(r"\S", th["text"]) or th["errors"]:
                    fails.append("no thinking block with text: %r" % th)
                elif th["answer"] != "(no text)":
                    fails.append("an answer beside an unclosed thinking: %r" % th)
            # 6. screenshot
            png = base64.b64decode(cdp.call("Page.captureScreenshot", {"format": "png"})["data"])
            with open(shot, "wb") as f:
                f.write(png)
            if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 2000:
                fails.append("screenshot is not a PNG of a page (%d bytes)" % len(png))
            print("screenshot: %s (%d bytes)" % (shot, len(png)))
        except Exception as e:
            fails.append("%s: %s" % (type(e).__name__, e))
            try:
                print("page state: %s" % cdp.eval(PAGE_STATE))
            except Exception:
                pass
        finally:
            cdp.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    for f in fails:
        print("FAIL " + f)
    if fails:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
