/* The Conduit pages in the browser, part 4 of 5: the DLQ browser. Filter by error code and time (UTC),
 * page through thousands, open one record in full, acknowledge the selected records or replay the
 * pending ones (both asked first; the audit log records the signed-in user). Needs common.js
 * (window.Conduit).
 */
(function (C) {
  "use strict";

  var $ = C.$;
  var el = C.el;
  var clear = C.clear;
  var num = C.num;
  var parseTime = C.parseTime;
  var fmtTime = C.fmtTime;
  var ask = C.ask;
  var showError = C.showError;

  var DLQ_PAGE = 50;
  var REPLAY_POLL_MS = 2000;

  function Dlq(api, onChange) {
    this.api = api;
    this.onChange = onChange;
    this.offset = 0;
    this.total = 0;
    this.filters = { code: "", since: "", until: "" };
    this.replayTimer = null;
  }

  /** A datetime-local value (taken as UTC, like every time on the page) as the API's ISO time. */
  function localInputToIso(value) {
    if (!value) return "";
    var v = value.length === 16 ? value + ":00" : value;
    return v + "Z";
  }

  Dlq.prototype.readFilters = function () {
    this.filters = {
      code: $("dlq-code").value,
      since: localInputToIso($("dlq-since").value),
      until: localInputToIso($("dlq-until").value),
    };
  };

  Dlq.prototype.load = function () {
    var self = this;
    var params = { code: this.filters.code, since: this.filters.since, until: this.filters.until, offset: this.offset, limit: DLQ_PAGE };
    return this.api
      .get("dlq", params)
      .then(function (data) {
        showError("dlq-error", null);
        self.render(data || {});
      })
      .catch(function (err) {
        showError("dlq-error", err);
      });
  };

  function distinctCode(e) {
    return !!e.code && e.code !== e.message && e.code !== e.error;
  }

  Dlq.prototype.render = function (data) {
    var self = this;
    this.total = data.total || 0;
    this.offset = data.offset || 0;
    var limit = data.limit || DLQ_PAGE;
    // Codes: keep the selection, list every code with its count.
    var select = $("dlq-code");
    var chosen = select.value;
    var codes = data.codes || [];
    clear(select).appendChild(el("option", { value: "", text: "all codes" }));
    var sum = 0;
    codes.forEach(function (c) {
      sum += c.count || 0;
      select.appendChild(el("option", { value: c.code, text: c.code + " (" + num(c.count) + ")" }));
    });
    if (chosen && !codes.some(function (c) { return c.code === chosen; })) {
      select.appendChild(el("option", { value: chosen, text: chosen + " (0)" }));
    }
    select.value = chosen;
    $("dlq-summary").textContent = codes.length ? num(sum) + " record" + (sum === 1 ? "" : "s") + " in " + codes.length + " error code" + (codes.length === 1 ? "" : "s") : "";

    var body = clear(document.querySelector("#dlq tbody"));
    var entries = data.entries || [];
    if (!entries.length) {
      body.appendChild(el("tr", null, [el("td", { colspan: "7", className: "muted", text: this.total ? "No records on this page." : "No dead-lettered records match." })]));
    }
    // The code column only when it says more than the error: a record without an error code of its own
    // has its (one-line) error as its code, which the error column shows already.
    var withCodes = entries.some(distinctCode);
    $("dlq").classList.toggle("with-codes", withCodes);
    entries.forEach(function (e) {
      var state = e.state || "pending";
      var check = el("input", { type: "checkbox", className: "dlq-select", value: e.id, "aria-label": "Select record " + (e.position || e.id), disabled: state !== "pending" });
      var open = el("button", { type: "button", className: "link dlq-open mono", text: e.position || e.id, title: "Show the whole record" });
      open.addEventListener("click", function () {
        self.open(e);
      });
      body.appendChild(
        el("tr", { className: "dlq-row", "data-id": e.id, "data-state": state }, [
          el("td", { className: "dlq-check" }, [check]),
          el("td", { className: "nowrap", title: e.time, text: fmtTime(parseTime(e.time)) }),
          el("td", { className: "dlq-position" }, [open]),
          el("td", { className: "dlq-code" }, distinctCode(e) ? [el("code", { text: e.code })] : ["-"]),
          el("td", { className: "dlq-node", text: e.node || "-" }),
          el("td", { className: "dlq-message", text: e.message || "" }),
          el("td", null, [el("span", { className: "state-tag " + state, text: state })]),
        ])
      );
    });
    var first = this.total ? this.offset + 1 : 0;
    var last = Math.min(this.offset + entries.length, this.total);
    $("dlq-page-info").textContent = this.total ? num(first) + "\u2013" + num(last) + " of " + num(this.total) : "0 of 0";
    $("dlq-prev").disabled = this.offset <= 0;
    $("dlq-next").disabled = this.offset + limit >= this.total;
    $("dlq-select-all").checked = false;
    this.selectionChanged();
  };

  Dlq.prototype.selected = function () {
    return Array.prototype.map.call(document.querySelectorAll("#dlq input.dlq-select:checked"), function (c) {
      return c.value;
    });
  };

  Dlq.prototype.selectionChanged = function () {
    var n = this.selected().length;
    var ack = $("dlq-acknowledge");
    ack.disabled = n === 0;
    ack.textContent = n ? "Acknowledge " + n + " selected" : "Acknowledge selected";
    var boxes = document.querySelectorAll("#dlq input.dlq-select:not(:disabled)");
    var all = $("dlq-select-all");
    all.checked = boxes.length > 0 && n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
  };

  /** The text of base64 ``value`` when it decodes to UTF-8 text (no control characters but tab and
   * newline), else null. */
  function base64Text(value) {
    if (typeof value !== "string" || !value || value.length % 4 || !/^[A-Za-z0-9+/]+={0,2}$/.test(value)) return null;
    try {
      var binary = atob(value);
      var bytes = new Uint8Array(binary.length);
      for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
      var text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
      return /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text) ? null : text;
    } catch (e) {
      return null;
    }
  }

  /** The entry with its record's key and position (OpenCDC JSON: base64) as text where they are text;
   * ``decoded`` names the fields it changed. */
  function readable(full) {
    var decoded = [];
    var record = full && full.record;
    if (!record || typeof record !== "object") return { entry: full, decoded: decoded };
    var copy = Object.assign({}, record);
    ["key", "position"].forEach(function (k) {
      var text = base64Text(record[k]);
      if (text !== null) {
        copy[k] = text;
        decoded.push("record." + k);
      }
    });
    return { entry: Object.assign({}, full, { record: copy }), decoded: decoded };
  }

  Dlq.prototype.open = function (entry) {
    var dialog = $("dlq-record");
    var pre = dialog.querySelector("pre");
    var note = $("dlq-record-note");
    var raw = $("dlq-record-raw");
    $("dlq-record-title").textContent = "DLQ record " + (entry.position || entry.id);
    pre.textContent = "Loading\u2026";
    note.textContent = "";
    raw.checked = false;
    raw.disabled = true;
    raw.onchange = null;
    if (typeof dialog.showModal === "function") {
      if (!dialog.open) dialog.showModal();
    } else {
      dialog.setAttribute("open", "");
    }
    this.api
      .entry(entry.id)
      .then(function (full) {
        var shown = readable(full);
        function show() {
          var asStored = raw.checked || !shown.decoded.length;
          pre.textContent = JSON.stringify(asStored ? full : shown.entry, null, 2);
          note.textContent = !shown.decoded.length
            ? "As stored."
            : asStored
              ? "As stored: " + shown.decoded.join(" and ") + " in base64, as in OpenCDC JSON."
              : shown.decoded.join(" and ") + " decoded from base64 as UTF-8 text.";
        }
        raw.disabled = !shown.decoded.length;
        raw.onchange = show;
        show();
      })
      .catch(function (err) {
        pre.textContent = "Could not load the record: " + err.message;
      });
  };

  function status(text, kind) {
    var node = $("dlq-status");
    node.textContent = text;
    node.className = kind || "";
  }

  Dlq.prototype.acknowledge = function () {
    var self = this;
    var ids = this.selected();
    if (!ids.length) return;
    var reason = $("dlq-reason").value.trim();
    var question =
      "Acknowledge " + ids.length + " DLQ record" + (ids.length === 1 ? "" : "s") + "?\n\n" +
      "They will never be replayed. The audit log records your name" + (reason ? " and the reason: " + reason : "") + ".";
    ask(question, "Acknowledge")
      .then(function (yes) {
        if (!yes) {
          status("Nothing acknowledged.", "");
          return null;
        }
        status("Acknowledging\u2026", "");
        return self.api.post("dlq_acknowledge", { ids: ids, reason: reason });
      })
      .then(function (r) {
        if (r === null) return;
        var n = r && typeof r.acknowledged === "number" ? r.acknowledged : ids.length;
        status("Acknowledged " + n + " record" + (n === 1 ? "" : "s") + ".", "ok");
        self.load();
        self.onChange();
      })
      .catch(function (err) {
        status("Acknowledge failed: " + err.message, "bad");
      });
  };

  Dlq.prototype.replay = function () {
    var self = this;
    var question =
      "Replay the dead-letter queue of this pipeline?\n\n" +
      "Every pending record (not acknowledged) goes through the pipeline again, in a new Spark job. " +
      "The audit log records your name.";
    ask(question, "Replay")
      .then(function (yes) {
        if (!yes) {
          status("Nothing replayed.", "");
          return null;
        }
        $("dlq-replay").disabled = true;
        status("Starting the replay\u2026", "");
        return self.api.post("dlq_replay", {});
      })
      .then(function (r) {
        if (r === null) return;
        status("Replay started" + (r && r.pid ? " (process " + r.pid + ")" : "") + "; waiting for it to finish\u2026", "");
        self.onChange();
        self.pollReplay();
      })
      .catch(function (err) {
        $("dlq-replay").disabled = false;
        status("Replay not started: " + err.message, "bad");
      });
  };

  /** The latest ``replayed`` audit event in words (its ``text`` when the API gives one). */
  function replayedText(last) {
    if (!last) return "";
    if (last.text) return last.text;
    var parts = [];
    if (typeof last.replayed === "number") parts.push(num(last.replayed) + " record" + (last.replayed === 1 ? "" : "s") + " replayed");
    if (typeof last.delivered === "number") parts.push(num(last.delivered) + " delivered");
    if (typeof last.failed_again === "number") parts.push(num(last.failed_again) + " failed again");
    if (typeof last.filtered === "number" && last.filtered) parts.push(num(last.filtered) + " filtered");
    if (typeof last.remaining === "number" && last.remaining) parts.push(num(last.remaining) + " still pending");
    var text = parts.join(", ");
    if (last.user) text += " (by " + last.user + ")";
    if (last.error) text += "; error: " + (typeof last.error === "object" ? last.error.message || JSON.stringify(last.error) : last.error);
    return text;
  }

  Dlq.prototype.pollReplay = function () {
    var self = this;
    clearTimeout(this.replayTimer);
    this.api
      .get("dlq_replay")
      .then(function (r) {
        if (r && r.running) {
          $("dlq-replay").disabled = true;
          self.replayTimer = setTimeout(function () {
            self.pollReplay();
          }, REPLAY_POLL_MS);
          return;
        }
        $("dlq-replay").disabled = false;
        var text = replayedText(r && r.last);
        status("Replay finished" + (text ? ": " + text : "."), "ok");
        self.load();
        self.onChange();
      })
      .catch(function (err) {
        $("dlq-replay").disabled = false;
        status("Could not follow the replay: " + err.message, "bad");
      });
  };

  /** On page load: a replay still running (started from another tab) keeps the button busy. */
  Dlq.prototype.checkReplay = function () {
    var self = this;
    this.api
      .get("dlq_replay")
      .then(function (r) {
        if (r && r.running) {
          status("A replay is running\u2026", "");
          self.pollReplay();
        }
      })
      .catch(function () {
        /* the DLQ table shows load errors; this is only a hint */
      });
  };

  Dlq.prototype.bind = function () {
    var self = this;
    $("dlq-apply").addEventListener("click", function () {
      self.readFilters();
      self.offset = 0;
      self.load();
    });
    $("dlq-code").addEventListener("change", function () {
      self.readFilters();
      self.offset = 0;
      self.load();
    });
    $("dlq-prev").addEventListener("click", function () {
      self.offset = Math.max(0, self.offset - DLQ_PAGE);
      self.load();
    });
    $("dlq-next").addEventListener("click", function () {
      if (self.offset + DLQ_PAGE < self.total) self.offset += DLQ_PAGE;
      self.load();
    });
    $("dlq-select-all").addEventListener("change", function (e) {
      document.querySelectorAll("#dlq input.dlq-select:not(:disabled)").forEach(function (c) {
        c.checked = e.target.checked;
      });
      self.selectionChanged();
    });
    document.querySelector("#dlq tbody").addEventListener("change", function (e) {
      if (e.target.classList.contains("dlq-select")) self.selectionChanged();
    });
    $("dlq-acknowledge").addEventListener("click", function () {
      self.acknowledge();
    });
    $("dlq-replay").addEventListener("click", function () {
      self.replay();
    });
    $("dlq-record-close").addEventListener("click", function () {
      $("dlq-record").close();
    });
    $("dlq-record").addEventListener("click", function (e) {
      if (e.target === this) this.close(); // a click on the backdrop
    });
  };

  C.Dlq = Dlq;
})(window.Conduit);
