/* The Conduit pages in the browser, part 2 of 5: the batch charts (uPlot), one point per committed
 * micro-batch, for the last hour, day or run. Needs common.js (window.Conduit) and, when it draws,
 * uPlot (vendor/uplot). Each chart container gets data-points = the number of batches plotted.
 */
(function (C) {
  "use strict";

  var $ = C.$;
  var el = C.el;
  var clear = C.clear;
  var cssVar = C.cssVar;
  var parseTime = C.parseTime;
  var fmtTime = C.fmtTime;

  var HEIGHT = 200;
  // Room per x tick label: "18:38:40" is ~55 px in the axis font; less than this and labels run together.
  var X_TICK_SPACE = 84;
  var Y_TICK_SPACE = 34;

  function Charts(api) {
    this.api = api;
    this.range = "run";
    this.batches = null;
    this.plots = {};
    this.now = null;
  }

  Charts.prototype.load = function () {
    var self = this;
    var range = this.range;
    return this.api
      .get("batches", { range: range })
      .then(function (data) {
        if (range !== self.range) return; // a later click won
        C.showError("charts-error", null);
        self.batches = (data && data.batches) || [];
        self.now = data && data.now;
        self.draw(false);
      })
      .catch(function (err) {
        C.showError("charts-error", err);
      });
  };

  Charts.prototype.setRange = function (range) {
    this.range = range;
    document.querySelectorAll("button[data-range]").forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-range") === range ? "true" : "false");
    });
    return this.load();
  };

  function batchTime(b) {
    return (parseTime(b.ended_at) || parseTime(b.started_at) || 0) / 1000;
  }

  function perSecond(count, seconds) {
    return seconds > 0 ? count / seconds : null;
  }

  /** The charts' data: x = batch end (epoch seconds), one array per series. */
  Charts.prototype.series = function () {
    var bs = this.batches.slice().sort(function (a, b) {
      return batchTime(a) - batchTime(b);
    });
    var x = bs.map(batchTime);
    var lagKeys = [];
    var lagUnits = {};
    bs.forEach(function (b) {
      Object.keys(b.lag || {}).forEach(function (node) {
        if (lagKeys.indexOf(node) < 0) lagKeys.push(node);
        lagUnits[node] = (b.lag[node] && b.lag[node].unit) || "";
      });
    });
    var seconds = bs
      .map(function (b) {
        return b.seconds;
      })
      .filter(function (s) {
        return typeof s === "number" && s > 0;
      });
    return {
      count: bs.length,
      x: x,
      batches: bs,
      // Typical batch length: the x room around a lone point.
      batchSeconds: seconds.length ? Math.max.apply(null, seconds) : 0,
      read: bs.map(function (b) {
        return perSecond(b.read, b.seconds);
      }),
      written: bs.map(function (b) {
        return perSecond(b.written, b.seconds);
      }),
      dlq: bs.map(function (b) {
        return b.dlq;
      }),
      duration: bs.map(function (b) {
        return b.seconds;
      }),
      lagKeys: lagKeys,
      lagUnits: lagUnits,
      lag: lagKeys.map(function (node) {
        return bs.map(function (b) {
          var l = b.lag && b.lag[node];
          return l && typeof l.value === "number" ? l.value : null;
        });
      }),
    };
  };

  function fmtValue(v, digits) {
    if (v === null || v === undefined) return "-";
    return v.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }

  /**
   * The x range from the data itself: half a batch of room at both ends, so the first and last bars are
   * whole. A lone point (or points at one instant) gets an explicit span: its batch's length on each side,
   * at least 10 s. (uPlot's own range for one time point is 86,400 "units" wide: 1,000 days in seconds.)
   */
  function xRange(u, s) {
    var xs = u.data[0];
    var n = xs.length;
    if (!n) return [0, 1];
    var min = xs[0];
    var max = xs[n - 1];
    if (max - min < 1) {
      var half = Math.max(10, Math.ceil(s.batchSeconds || 0));
      return [min - half, max + half];
    }
    var pad = (max - min) / (n - 1) / 2;
    return [min - pad, max + pad];
  }

  /** 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten: the smallest at least ``v``. */
  function niceCeil(v) {
    if (!(v > 0)) return 1;
    var mag = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * mag >= v * (1 - 1e-9)) return steps[i] * mag;
    }
    return 10 * mag;
  }

  /** Counts, rates, seconds and lag: from zero, with a little room on top; a flat zero line gets 0-1. */
  function yRange(u, min, max) {
    if (min === null || max === null || !isFinite(min) || !isFinite(max)) return [0, 1];
    var lo = Math.min(0, min);
    var hi = Math.max(0, max);
    if (hi - lo <= 0) return [lo, lo + 1];
    return [lo, niceCeil(hi * 1.08)];
  }

  /**
   * x tick labels: 24-hour UTC times, as everywhere on the page, as short as the tick step allows
   * (HH:MM:SS under a minute, else HH:MM, days as MM-DD); the date on a second line under the first tick
   * and wherever the day changes.
   */
  function xTickLabels(u, splits, axisIdx, space, incr) {
    var prevDay = null;
    return splits.map(function (ts, i) {
      var text = fmtTime(ts * 1000); // "2026-11-24 18:17:24"
      var day = text.slice(5, 10);
      if (incr >= 86400) return day;
      var time = incr >= 60 ? text.slice(11, 16) : text.slice(11, 19);
      var showDay = i === 0 || day !== prevDay;
      prevDay = day;
      return showDay ? time + "\n" + day : time;
    });
  }

  function yTickLabels(u, vals) {
    return vals.map(function (v) {
      if (v === null) return "";
      return Math.abs(v) >= 10000 ? (v / 1000).toLocaleString("en-US") + "k" : v.toLocaleString("en-US");
    });
  }

  function chartOptions(width, s, series, colors, few) {
    var axis = colors.axis;
    var grid = colors.grid;
    return {
      width: width,
      height: HEIGHT,
      // Room on the right for half of the last x label.
      padding: [10, 18, 0, 0],
      tzDate: function (ts) {
        return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
      },
      cursor: { drag: { x: true, y: false }, points: { size: 7 } },
      scales: {
        x: {
          time: true,
          range: function (u) {
            return xRange(u, s);
          },
        },
        y: { range: yRange },
      },
      legend: { live: true },
      axes: [
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          space: X_TICK_SPACE,
          size: 44, // two lines: time, and the date under the first tick
          values: xTickLabels,
        },
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          space: Y_TICK_SPACE,
          size: 56,
          values: yTickLabels,
        },
      ],
      series: [{ label: "batch end (UTC)", value: "{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}" }].concat(
        series.map(function (x) {
          var out = {
            label: x.label,
            stroke: x.color,
            width: 1.6,
            fill: x.fill,
            spanGaps: false,
            points: { show: few, size: 5, stroke: x.color, fill: x.color },
            value: function (u, v) {
              return fmtValue(v, x.digits);
            },
          };
          if (x.bars) {
            out.paths = uPlot.paths.bars({ size: [0.7, 28], align: 0 });
            out.points = { show: false };
          }
          return out;
        })
      ),
    };
  }

  function alpha(color, a) {
    var m = /^#([0-9a-f]{6})$/i.exec(color);
    if (!m) return color;
    var n = parseInt(m[1], 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  /**
   * Draws every chart from this.batches. ``recolor`` rebuilds them (theme change); otherwise a chart
   * whose series are unchanged only gets its new data.
   */
  Charts.prototype.draw = function (recolor) {
    if (!this.batches) return;
    var s = this.series();
    var c = {
      read: cssVar("--c-read"),
      written: cssVar("--c-written"),
      dlq: cssVar("--c-dlq"),
      duration: cssVar("--c-duration"),
      lag: [cssVar("--c-lag-1"), cssVar("--c-lag-2"), cssVar("--c-lag-3")],
      axis: cssVar("--c-axis"),
      grid: cssVar("--c-grid"),
    };
    var few = s.count <= 120;
    var empty = "No batches " + C.RANGE_LABEL[this.range];
    this.plot("chart-throughput", s, recolor, empty, [
      { label: "read/s", color: c.read, values: s.read },
      { label: "written/s", color: c.written, values: s.written },
    ], c, few);
    this.plot("chart-dlq", s, recolor, empty, [
      { label: "dead-lettered", color: c.dlq, fill: alpha(c.dlq, 0.55), values: s.dlq, bars: true, digits: 0 },
    ], c, few);
    this.plot("chart-duration", s, recolor, empty, [
      { label: "seconds", color: c.duration, fill: alpha(c.duration, 0.08), values: s.duration, digits: 2 },
    ], c, few);
    var hasLag = s.lagKeys.length > 0;
    $("chart-lag-card").hidden = !hasLag;
    $("chart-lag").hidden = !hasLag;
    if (hasLag) {
      this.plot(
        "chart-lag",
        s,
        recolor,
        empty,
        s.lagKeys.map(function (node, i) {
          return { label: node + (s.lagUnits[node] ? " (" + s.lagUnits[node] + ")" : ""), color: c.lag[i % c.lag.length], values: s.lag[i], digits: 0 };
        }),
        c,
        few
      );
    } else {
      this.destroy("chart-lag");
      $("chart-lag").removeAttribute("data-points");
    }
  };

  Charts.prototype.destroy = function (id) {
    if (this.plots[id]) {
      this.plots[id].plot.destroy();
      delete this.plots[id];
    }
  };

  Charts.prototype.plot = function (id, s, recolor, emptyText, series, colors, few) {
    var box = $(id);
    var data = [s.x].concat(
      series.map(function (x) {
        return x.values;
      })
    );
    var signature =
      series
        .map(function (x) {
          return x.label;
        })
        .join("|") + (few ? "|points" : "");
    var existing = this.plots[id];
    if (s.count === 0) {
      this.destroy(id);
      clear(box).appendChild(el("div", { className: "chart-empty", text: emptyText }));
    } else if (existing && !recolor && existing.signature === signature) {
      existing.s.batchSeconds = s.batchSeconds; // the x range of a lone point reads it
      existing.plot.setData(data);
    } else {
      this.destroy(id);
      clear(box);
      var width = Math.max(280, box.clientWidth || 600);
      var held = { batchSeconds: s.batchSeconds };
      var plot = new uPlot(chartOptions(width, held, series, colors, few), data, box);
      this.plots[id] = { plot: plot, signature: signature, s: held };
    }
    box.setAttribute("data-points", String(s.count));
  };

  Charts.prototype.resize = function () {
    var plots = this.plots;
    Object.keys(plots).forEach(function (id) {
      var box = $(id);
      var w = box.clientWidth;
      if (w > 0 && Math.abs(plots[id].plot.width - w) > 2) plots[id].plot.setSize({ width: w, height: HEIGHT });
    });
  };

  C.Charts = Charts;
})(window.Conduit);
