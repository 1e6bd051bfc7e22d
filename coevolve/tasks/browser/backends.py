"""Two browsers behind one small interface (`Session`): an in-process text browser over `WebApp`, and
a real headless Chromium driven by Playwright against the app served over HTTP on 127.0.0.1.

The tools (in `coevolve.tasks.browser.env`) validate against the session's DOM and then call one of the
session's primitive operations, so both backends give the same observations for the same actions.
Playwright's async API runs on an event loop in one dedicated thread per `ChromiumBrowser`; a caller
(one of the executor's tool threads) hands it a coroutine and waits for the result, so operations on
different pages overlap in the one browser instead of queueing behind each other.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

from coevolve.settings import environment
from coevolve.tasks.browser.app import WebApp
from coevolve.tasks.browser.dom import Node, default_button, form_data, parse

T = TypeVar("T")
CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)
MAX_REDIRECTS = 5
ACTION_TIMEOUT_MS = 10_000
POOL_SIZE = 8


class Session(Protocol):
    url: str
    status: int

    def dom(self) -> Node: ...
    def navigate(self, target: str) -> None: ...
    def fill(self, element_id: str, text: str) -> None: ...
    def choose(self, element_id: str, value: str) -> None: ...
    def toggle(self, element_id: str) -> None: ...
    def follow(self, element_id: str, href: str) -> None: ...
    def submit(self, form_id: str, submitter_id: str | None) -> None: ...
    def click_submit(self, button_id: str) -> None: ...
    def close(self) -> None: ...


def path_of(url: str) -> str:
    p = urlsplit(url)
    return (p.path or "/") + (f"?{p.query}" if p.query else "")


# ------------------------------------------------------------------------------------- text browser
class TextSession:
    """A browser without a renderer: it keeps the page's DOM, applies edits to it, and submits forms
    with HTML's form-data rules by calling the application directly."""

    def __init__(self, app: WebApp):
        self.app = app
        self.url = "/"
        self.status = 0
        self._root = parse("")
        self.navigate("/")

    def dom(self) -> Node:
        return self._root

    def _request(self, method: str, target: str, data: dict[str, str] | None = None) -> None:
        for _ in range(MAX_REDIRECTS + 1):
            resp = self.app.handle(method, target, data)
            if resp.status in (301, 302, 303, 307, 308) and resp.location:
                target, method, data = path_of(urljoin("http://app" + target, resp.location)), "GET", None
                continue
            break
        self.url, self.status, self._root = path_of(target), resp.status, parse(resp.html)

    def navigate(self, target: str) -> None:
        self._request("GET", target)

    def _node(self, element_id: str) -> Node:
        n = self._root.by_id(element_id)
        if n is None:
            raise KeyError(element_id)
        return n

    def fill(self, element_id: str, text: str) -> None:
        n = self._node(element_id)
        n.attrs["value"] = text if n.tag == "textarea" else text.replace("\r", "").replace("\n", "")

    def choose(self, element_id: str, value: str) -> None:
        from coevolve.tasks.browser.dom import option_value, options

        for o in options(self._node(element_id)):
            if option_value(o) == value:
                o.attrs["selected"] = ""
            else:
                o.attrs.pop("selected", None)

    def toggle(self, element_id: str) -> None:
        n = self._node(element_id)
        if "checked" in n.attrs:
            n.attrs.pop("checked")
        else:
            n.attrs["checked"] = ""

    def follow(self, element_id: str, href: str) -> None:
        self.navigate(path_of(urljoin("http://app" + self.url, href)))

    def submit(self, form_id: str, submitter_id: str | None) -> None:
        form = self._node(form_id)
        submitter = self._root.by_id(submitter_id) if submitter_id else default_button(form)
        data = form_data(form, submitter)
        method = form.attrs.get("method", "get").lower()
        action = path_of(urljoin("http://app" + self.url, form.attrs.get("action") or self.url))
        if method == "post":
            self._request("POST", action, dict(data))
        else:
            self._request("GET", action.split("?")[0] + "?" + urlencode(data))

    def click_submit(self, button_id: str) -> None:
        button = self._node(button_id)
        form = button.form()
        if form is None or not form.attrs.get("id"):
            raise KeyError(button_id)
        self.submit(form.attrs["id"], button_id)

    def close(self) -> None:
        pass


# -------------------------------------------------------------------------------------- HTTP server
class AppServer:
    """Serves a `WebApp` over HTTP on 127.0.0.1 (an OS-chosen port) from a daemon thread."""

    def __init__(self, app: WebApp):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                form = None
                if method == "POST":
                    n = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(n).decode("utf-8", "replace") if n else ""
                    form = dict(parse_qsl(raw, keep_blank_values=True))
                resp = app.handle(method, self.path, form)
                body = resp.html.encode()
                self.send_response(resp.status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                if resp.location:
                    self.send_header("Location", resp.location)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.startswith("/favicon"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="browser-app", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def stop_soon(self) -> None:
        """Ask the serving thread to stop without waiting (safe from a GC finalizer, unlike shutdown)."""
        self.httpd._BaseServer__shutdown_request = True  # what shutdown() sets before it waits


# ------------------------------------------------------------------------------------------ Chromium
SNAPSHOT_JS = """() => {
  const live = document.documentElement;
  const clone = live.cloneNode(true);
  const a = live.querySelectorAll('input, textarea, select');
  const b = clone.querySelectorAll('input, textarea, select');
  for (let i = 0; i < a.length; i++) {
    const x = a[i], y = b[i];
    if (x.tagName === 'SELECT') {
      for (let j = 0; j < x.options.length; j++) {
        if (x.options[j].selected) y.options[j].setAttribute('selected', '');
        else y.options[j].removeAttribute('selected');
      }
    } else if (x.tagName === 'TEXTAREA') {
      y.textContent = x.value;
    } else if (x.type === 'checkbox' || x.type === 'radio') {
      if (x.checked) y.setAttribute('checked', ''); else y.removeAttribute('checked');
    } else {
      y.setAttribute('value', x.value);
    }
  }
  return '<!DOCTYPE html>' + clone.outerHTML;
}"""
SUBMIT_JS = """([formId, buttonId]) => {
  const f = document.getElementById(formId);
  const b = buttonId ? document.getElementById(buttonId) : null;
  if (b) f.requestSubmit(b); else f.requestSubmit();
}"""


def chromium_executable() -> str | None:
    """The Chromium binary to drive: $COEVOLVE_CHROMIUM, else Debian's /usr/bin/chromium, else PATH."""
    for cand in (environment().chromium or None, "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if cand and os.path.exists(cand):
            return cand
    return None


def chromium_available() -> bool:
    from importlib.util import find_spec

    return chromium_executable() is not None and find_spec("playwright") is not None


class ChromiumBrowser:
    """One headless Chromium process; each environment gets its own context (cookies, pages)."""

    def __init__(self, executable: str | None = None):
        exe = executable or chromium_executable()
        if exe is None:
            raise RuntimeError("no Chromium found: install Debian's `chromium` or set COEVOLVE_CHROMIUM")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chromium", daemon=True)
        self._thread.start()
        self._pw: Any = None
        self._browser: Any = None
        self._free: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        # pages handed back (possibly from a GC finalizer, which must neither block nor take locks):
        # a deque append is atomic; the next call resets them on the browser's loop first
        self._returned: deque[tuple[Any, Any]] = deque()
        try:
            self.call(self._start, exe)
        except BaseException:
            self._stop_loop()
            raise

    async def _start(self, exe: str) -> None:
        from playwright.async_api import async_playwright

        self._pw = await async_playwright().start()
        self._browser = await self._pw.chromium.launch(executable_path=exe, headless=True, args=list(CHROMIUM_ARGS))

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` (a coroutine) on the browser's loop and wait for its result."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("ChromiumBrowser.call from the browser's own loop would wait on itself")
        return asyncio.run_coroutine_threadsafe(self._on_loop(fn, args), self._loop).result(timeout=120)

    async def _on_loop(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
        while self._returned:
            await self._recycle(*self._returned.popleft())
        return await fn(*args)

    def session(self, app: WebApp) -> ChromiumSession:
        return ChromiumSession(self, app)

    def new_page(self) -> tuple[Any, Any]:
        """A (context, page) pair for one session: a pooled one when free, else a new one."""
        with self._lock:
            if self._free:
                return self._free.pop()

        async def make() -> tuple[Any, Any]:
            ctx = await self._browser.new_context(java_script_enabled=True)
            ctx.set_default_timeout(ACTION_TIMEOUT_MS)
            return ctx, await ctx.new_page()

        return self.call(make)

    def release_page(self, ctx: Any, page: Any) -> None:
        """Hand a page back; it is blanked and pooled (or closed) on the browser's loop later."""
        self._returned.append((ctx, page))

    async def _recycle(self, ctx: Any, page: Any) -> None:
        """Back to the pool, blank and without cookies; closed instead when broken or the pool is full."""
        if self._browser is None:
            return
        try:
            await page.goto("about:blank")
            await ctx.clear_cookies()
        except Exception:  # noqa: BLE001 - a broken page is closed, not reused
            await ctx.close()
            return
        with self._lock:
            if len(self._free) < POOL_SIZE:
                self._free.append((ctx, page))
                return
        await ctx.close()

    def close(self) -> None:
        async def stop() -> None:
            self._free.clear()
            if self._browser is not None:
                await self._browser.close()
            if self._pw is not None:
                await self._pw.stop()
            self._browser = self._pw = None

        try:
            self.call(stop)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


class ChromiumSession:
    def __init__(self, browser: ChromiumBrowser, app: WebApp):
        self.browser = browser
        self.server = AppServer(app)
        self.url = "/"
        self.status = 0
        self._ctx, self._page = browser.new_page()
        self._finalizer = weakref.finalize(self, _close_session, browser, self._ctx, self._page, self.server)
        self.navigate("/")

    def _run(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        return self.browser.call(fn, self._page)

    def _load(self, act: Callable[[Any], Awaitable[Any]]) -> None:
        """A page load: its HTTP status and where it ended (after redirects)."""
        async def load(p: Any) -> tuple[int, str]:
            response = await act(p)
            return (response.status if response is not None else 200), p.url

        self.status, url = self._run(load)
        self.url = path_of(url)

    def dom(self) -> Node:
        return parse(self._run(lambda p: p.evaluate(SNAPSHOT_JS)))

    def navigate(self, target: str) -> None:
        self._load(lambda p: p.goto(self.server.origin + target, wait_until="load"))

    @staticmethod
    def _sel(element_id: str) -> str:
        return f'[id="{element_id}"]'

    def fill(self, element_id: str, text: str) -> None:
        self._run(lambda p: p.locator(self._sel(element_id)).fill(text))

    def choose(self, element_id: str, value: str) -> None:
        self._run(lambda p: p.locator(self._sel(element_id)).select_option(value=value))

    def toggle(self, element_id: str) -> None:
        self._run(lambda p: p.locator(self._sel(element_id)).click())

    def _navigating(self, act: Callable[[Any], Awaitable[Any]]) -> None:
        async def go(p: Any) -> Any:
            async with p.expect_navigation(wait_until="load") as nav:
                await act(p)
            return await nav.value

        self._load(go)

    def follow(self, element_id: str, href: str) -> None:
        self._navigating(lambda p: p.locator(self._sel(element_id)).click())

    def submit(self, form_id: str, submitter_id: str | None) -> None:
        self._navigating(lambda p: p.evaluate(SUBMIT_JS, [form_id, submitter_id]))

    def click_submit(self, button_id: str) -> None:
        self._navigating(lambda p: p.locator(self._sel(button_id)).click())

    def close(self) -> None:
        self._finalizer()


def _close_session(browser: ChromiumBrowser, ctx: Any, page: Any, server: AppServer) -> None:
    """Runs from close() or as a GC finalizer: must not block or take locks (it may interrupt a thread
    that holds one, e.g. inside ThreadPoolExecutor.submit)."""
    browser.release_page(ctx, page)
    server.stop_soon()


_SHARED: ChromiumBrowser | None = None
_SHARED_LOCK = threading.Lock()


def shared_chromium() -> ChromiumBrowser:
    """A process-wide browser for environments made with backend="chromium" and no browser given."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ChromiumBrowser()
            atexit.register(_SHARED.close)
        return _SHARED
