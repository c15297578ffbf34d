/* The Conduit pages in the browser, part 1 of 5: what every page shares (theme, Airflow's frame and the
 * page's own confirm dialog, DOM and time helpers, the JSON API). Loaded first, in <head>, so the theme
 * is set before the first paint.
 *
 * No framework and no build step: five plain scripts (common, charts, timeline, dlq, pages), loaded in
 * that order by the templates, share one namespace object, window.Conduit. Every value from the API
 * reaches the page as text (textContent, setAttribute), never as HTML. Times in the state dir are UTC
 * and are shown in UTC, as Airflow shows them by default. The boot data (pipeline id, state dir, API
 * URLs) is the JSON of #conduit-boot.
 */
(function (C) {
  "use strict";

  C.REFRESH_MS = 15000;
  C.RANGE_LABEL = { hour: "in the last hour", day: "in the last day", run: "in the latest run" };

  // Theme ---------------------------------------------------------------------------------------------
  // Airflow's UI (next-themes) puts class "dark" on its <html> and keeps the choice in localStorage.theme.
  // Framed by it on the same origin, we follow the parent document live, and take the colours it actually
  // paints around our frame (Airflow's navy in dark, not our own near-black); alone, the stored choice,
  // else the system's, with our own palette.
  var media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function parentRoot() {
    try {
      if (window.parent && window.parent !== window) return window.parent.document.documentElement;
    } catch (e) {
      /* another origin: not Airflow's frame */
    }
    return null;
  }

  function wantedTheme() {
    var root = parentRoot();
    if (root) return root.classList.contains("dark") ? "dark" : "light";
    var stored = null;
    try {
      stored = window.localStorage.getItem("theme");
    } catch (e) {
      /* storage disabled */
    }
    if (stored === "dark" || stored === "light") return stored;
    return media && media.matches ? "dark" : "light";
  }

  var probe = null;

  /** The alpha (0-255) of any CSS colour, whatever its syntax (rgb(), oklch(), ...): a canvas parses it. */
  function opacity(color) {
    if (!color || color === "transparent") return 0;
    if (!probe) {
      var canvas = document.createElement("canvas");
      canvas.width = canvas.height = 1;
      probe = canvas.getContext("2d", { willReadFrequently: true });
    }
    if (!probe) return 255;
    probe.clearRect(0, 0, 1, 1);
    probe.fillStyle = "rgba(0,0,0,0)";
    probe.fillStyle = color;
    probe.fillRect(0, 0, 1, 1);
    return probe.getImageData(0, 0, 1, 1).data[3];
  }

  /**
   * The colours the parent document paints around our frame: the first opaque background among the
   * frame's ancestors, and the text colour there. ``null`` alone or on another origin.
   */
  function hostColours() {
    var frame = null;
    try {
      frame = window.frameElement;
    } catch (e) {
      return null;
    }
    if (!frame || !frame.ownerDocument || !frame.ownerDocument.defaultView) return null;
    var win = frame.ownerDocument.defaultView;
    var bg = null;
    for (var node = frame.parentElement; node && !bg; node = node.parentElement) {
      var c = win.getComputedStyle(node).backgroundColor;
      if (opacity(c) === 255) bg = c;
    }
    var fg = win.getComputedStyle(frame.parentElement || frame).color;
    if (!bg || opacity(fg) === 0) return null;
    return { bg: bg, fg: fg };
  }

  function applyHostColours() {
    var html = document.documentElement;
    var colours = hostColours();
    if (!colours) {
      html.removeAttribute("data-host-colours");
      html.style.removeProperty("--bg");
      html.style.removeProperty("--fg");
      return;
    }
    // conduit.css derives the panels, borders and muted text of [data-host-colours] from these two.
    html.style.setProperty("--bg", colours.bg);
    html.style.setProperty("--fg", colours.fg);
    html.setAttribute("data-host-colours", "");
  }

  function applyTheme() {
    var theme = wantedTheme();
    var html = document.documentElement;
    applyHostColours();
    if (html.getAttribute("data-theme") === theme) return;
    html.setAttribute("data-theme", theme);
    document.dispatchEvent(new CustomEvent("conduit-theme", { detail: theme }));
  }

  applyTheme();
  var parentHtml = parentRoot();
  if (parentHtml && window.MutationObserver) {
    new MutationObserver(function () {
      applyTheme();
      // The parent's colours may settle a little after its class changes (transitions, its own render).
      setTimeout(applyHostColours, 150);
      setTimeout(applyHostColours, 600);
    }).observe(parentHtml, { attributes: true, attributeFilter: ["class", "style"] });
  }
  if (parentHtml) {
    document.addEventListener("DOMContentLoaded", applyHostColours);
    window.addEventListener("load", applyHostColours);
  }
  window.addEventListener("storage", function (e) {
    if (e.key === "theme") applyTheme();
  });
  if (media && media.addEventListener) media.addEventListener("change", applyTheme);

  C.cssVar = function (name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  };

  // Airflow's frame ----------------------------------------------------------------------------------
  // Airflow 3.3 frames external views with sandbox="allow-scripts allow-same-origin allow-forms
  // allow-downloads": no allow-modals (window.confirm() returns false without asking) and no
  // allow-top-navigation (a target="_top" link is blocked). The page asks in a dialog of its own there,
  // and opens Airflow's pages through a link of the parent document, which is same-origin.
  function sandboxLacks(flag) {
    try {
      var frame = window.frameElement;
      return !!(frame && frame.hasAttribute("sandbox") && !frame.sandbox.contains(flag));
    } catch (e) {
      return false;
    }
  }

  /** A promise of the user's yes/no: window.confirm(), or the page's own dialog where that is ignored. */
  function ask(question, action) {
    if (!sandboxLacks("allow-modals")) return Promise.resolve(window.confirm(question));
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") return Promise.resolve(false);
    document.getElementById("confirm-text").textContent = question;
    document.getElementById("confirm-ok").textContent = action || "OK";
    return new Promise(function (resolve) {
      dialog.returnValue = "";
      dialog.addEventListener(
        "close",
        function () {
          resolve(dialog.returnValue === "ok");
        },
        { once: true }
      );
      dialog.showModal();
    });
  }

  function openTop(href) {
    var doc = window.top.document;
    var a = doc.createElement("a");
    a.href = new URL(href, window.location.href).toString();
    doc.body.appendChild(a);
    a.click();
    a.remove();
  }

  document.addEventListener("click", function (e) {
    var link = e.target && e.target.closest ? e.target.closest('a[target="_top"]') : null;
    if (!link || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    if (!sandboxLacks("allow-top-navigation") || !sandboxLacks("allow-top-navigation-by-user-activation")) return;
    try {
      openTop(link.getAttribute("href"));
      e.preventDefault();
    } catch (err) {
      /* not same-origin after all: the browser's own handling (blocked or not) */
    }
  });

  // Small helpers -------------------------------------------------------------------------------------
  function $(id) {
    return document.getElementById(id);
  }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "text") node.textContent = String(v);
        else if (k === "className") node.className = v;
        else if (k === "style") node.setAttribute("style", v);
        else node.setAttribute(k, v === true ? "" : String(v));
      });
    }
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function num(n) {
    return typeof n === "number" ? n.toLocaleString("en-US") : n === null || n === undefined ? "-" : String(n);
  }

  function parseTime(s) {
    if (!s) return null;
    var t = Date.parse(s);
    return isNaN(t) ? null : t;
  }

  function pad(n) {
    return n < 10 ? "0" + n : String(n);
  }

  /** "2026-11-24 18:17:24" (UTC) of epoch milliseconds. */
  function fmtTime(ms, withDate) {
    if (ms === null || ms === undefined) return "-";
    var d = new Date(ms);
    var time = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
    if (withDate === false) return time;
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + time;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || isNaN(s)) return "-";
    if (s < 1) return (Math.round(s * 100) / 100).toString() + " s";
    if (s < 90) return (Math.round(s * 10) / 10).toString() + " s";
    var m = Math.floor(s / 60);
    if (m < 90) return m + " min " + Math.round(s - m * 60) + " s";
    var h = Math.floor(m / 60);
    return h + " h " + (m - h * 60) + " min";
  }

  function readBoot() {
    var node = $("conduit-boot");
    try {
      return node ? JSON.parse(node.textContent) : {};
    } catch (e) {
      return {};
    }
  }

  // API ----------------------------------------------------------------------------------------------
  // The app passes its URLs in boot.api; any it does not name are the contract's paths under the
  // pipeline's JSON URL (/conduit/api/pipelines/{id}/...). state_dir goes on every request.
  var API_SUFFIX = {
    batches: "/batches",
    timeline: "/timeline",
    events: "/events",
    dlq: "/dlq",
    dlq_acknowledge: "/dlq/acknowledge",
    dlq_replay: "/dlq/replay",
  };

  function Api(boot) {
    this.boot = boot;
    this.urls = boot.api || {};
  }

  Api.prototype.url = function (key, params, suffix) {
    var base = this.urls[key];
    if (!base && API_SUFFIX[key] && this.urls.pipeline) {
      var p = new URL(this.urls.pipeline, window.location.href);
      p.pathname = p.pathname.replace(/\/$/, "") + API_SUFFIX[key];
      base = p.toString();
    }
    if (!base) throw new Error("the page has no URL for " + key);
    var u = new URL(base, window.location.href);
    if (suffix) u.pathname = u.pathname.replace(/\/$/, "") + suffix;
    if (this.boot.state_dir && !u.searchParams.has("state_dir")) u.searchParams.set("state_dir", this.boot.state_dir);
    Object.keys(params || {}).forEach(function (k) {
      var v = params[k];
      if (v !== null && v !== undefined && v !== "") u.searchParams.set(k, String(v));
    });
    return u.toString();
  };

  function request(url, options) {
    var opts = Object.assign({ credentials: "same-origin", headers: { Accept: "application/json" } }, options || {});
    return fetch(url, opts).then(function (resp) {
      return resp.text().then(function (text) {
        var body = null;
        try {
          body = text ? JSON.parse(text) : null;
        } catch (e) {
          body = null;
        }
        if (!resp.ok) {
          var detail = body && body.detail !== undefined ? body.detail : text || resp.statusText;
          if (typeof detail !== "string") detail = JSON.stringify(detail);
          var err = new Error(resp.status + ": " + detail);
          err.status = resp.status;
          throw err;
        }
        return body;
      });
    });
  }

  Api.prototype.get = function (key, params, suffix) {
    return request(this.url(key, params, suffix));
  };

  /** One DLQ entry: boot.api.dlq_entry with its ``{id}`` replaced, else ``{dlq}/{id}``. */
  Api.prototype.entry = function (id) {
    var template = this.urls.dlq_entry;
    if (template && template.indexOf("{id}") >= 0) {
      var u = new URL(template.replace("{id}", encodeURIComponent(id)), window.location.href);
      if (this.boot.state_dir) u.searchParams.set("state_dir", this.boot.state_dir);
      return request(u.toString());
    }
    return this.get("dlq", null, "/" + encodeURIComponent(id));
  };

  Api.prototype.post = function (key, body) {
    return request(this.url(key), {
      method: "POST",
      body: JSON.stringify(body || {}),
      headers: { "Content-Type": "application/json", Accept: "application/json" },
    });
  };

  function showError(id, err) {
    var node = $(id);
    if (node) node.textContent = err ? "Could not load: " + (err.message || err) : "";
  }

  // Status badge and error box, as the templates render them (macros.html) -----------------------
  var KNOWN_STATUSES = ["running", "recovering", "degraded", "failed", "stopped", "refused"];

  function statusBadge(status) {
    var s = status || "unknown";
    return el("span", {
      className: "status " + (KNOWN_STATUSES.indexOf(s) >= 0 ? s : "unknown"),
      "data-status": s,
      text: s,
    });
  }

  function errorBox(error) {
    if (!error) return null;
    var head = el("b", { text: [error.kind, error.code].filter(Boolean).join(" ") });
    var parts = [head];
    if (error.node) parts.push(" at " + error.node);
    parts.push(": ");
    parts.push(el("span", { className: "error-message", text: error.message || "" }));
    return el("div", { className: "error" }, parts);
  }

  C.$ = $;
  C.el = el;
  C.clear = clear;
  C.num = num;
  C.parseTime = parseTime;
  C.fmtTime = fmtTime;
  C.fmtSeconds = fmtSeconds;
  C.readBoot = readBoot;
  C.ask = ask;
  C.Api = Api;
  C.showError = showError;
  C.statusBadge = statusBadge;
  C.errorBox = errorBox;
})((window.Conduit = window.Conduit || {}));
