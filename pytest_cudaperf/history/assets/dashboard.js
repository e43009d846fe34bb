/* The cudaperf dashboard's script: draws each timeline of a test page from the JSON the page
   carries (#cudaperf-data), shows a point's run on hover and a change point's kernel diff on
   click, and filters the index's tests. No dependency and nothing fetched: it works opened from
   a file. Text from the history is only ever set as text, never parsed as HTML. */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var WIDTH = 960;
  var PLOT_HEIGHT = 250; // the plotting area; the margins come on top
  var MARGIN = { left: 84, right: 24, bottom: 78 };
  var MARKER_ROW = 18; // a row of change point markers (one per device class with changes)
  var WORSE = "#C5221F";
  var BETTER = "#137333";
  var HOVER_RADIUS = 28; // in the plot's own units

  function svg(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) {
      node.setAttribute(key, String(attrs[key]));
    });
    if (parent) parent.appendChild(node);
    return node;
  }

  function text(parent, content, attrs) {
    var node = svg("text", attrs, parent);
    node.textContent = content;
    return node;
  }

  // The unit the axis reads best in: [divisor, label].
  function axisUnit(unit, largest) {
    if (unit === "ms") {
      if (largest < 1e-3) return [1e-6, "ns"];
      if (largest < 1) return [1e-3, "µs"];
      if (largest < 1000) return [1, "ms"];
      return [1000, "s"];
    }
    if (unit === "bytes") {
      var names = ["B", "KiB", "MiB", "GiB", "TiB"];
      var i = 0;
      while (i < names.length - 1 && largest >= Math.pow(1024, i + 1)) i += 1;
      return [Math.pow(1024, i), names[i]];
    }
    return [1, unit];
  }

  function niceTicks(lo, hi, count) {
    var raw = (hi - lo) / count;
    var step = Math.pow(10, Math.floor(Math.log10(raw)));
    var ratio = raw / step;
    if (ratio >= 7.5) step *= 10;
    else if (ratio >= 3.5) step *= 5;
    else if (ratio >= 1.5) step *= 2;
    var ticks = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
    return { ticks: ticks, step: step };
  }

  function placeLabel(place) {
    if (place.commit) return place.commit.slice(0, 7);
    return place.date.slice(5, 16).replace("T", " ");
  }

  function drawPlot(container, plot, tooltip) {
    var rows = plot.lines.filter(function (line) { return line.changes.length; }).length;
    var top = 16 + MARKER_ROW * Math.max(1, rows);
    var M = { left: MARGIN.left, right: MARGIN.right, bottom: MARGIN.bottom, top: top };
    var HEIGHT = top + PLOT_HEIGHT + MARGIN.bottom;
    var width = WIDTH - M.left - M.right;
    var height = PLOT_HEIGHT;
    var values = [];
    plot.lines.forEach(function (line) {
      line.runs.forEach(function (run) {
        values.push(run.v);
        if (run.lo !== undefined) values.push(run.lo, run.hi);
      });
      if (line.drift) values.push(line.drift.from, line.drift.to);
    });
    var lo = Math.min.apply(null, values);
    var hi = Math.max.apply(null, values);
    var pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.05 || 1;
    lo -= pad;
    hi += pad;
    if (lo < 0 && Math.min.apply(null, values) >= 0) lo = 0;
    var places = plot.axis.length;
    function x(place) {
      return M.left + ((place + 0.5) * width) / places;
    }
    function y(value) {
      return M.top + height - ((value - lo) / (hi - lo)) * height;
    }

    var root = svg("svg", {
      class: "plot-svg",
      viewBox: "0 0 " + WIDTH + " " + HEIGHT,
      role: "img",
      "aria-label": plot.title + " over commits",
    });
    container.appendChild(root);

    // the axes, their ticks and labels
    var unit = axisUnit(plot.unit, Math.max(Math.abs(lo), Math.abs(hi)));
    var ticks = niceTicks(lo, hi, 6);
    var decimals = Math.max(0, -Math.floor(Math.log10(ticks.step / unit[0]) + 1e-9));
    var axes = svg("g", { class: "axes" }, root);
    ticks.ticks.forEach(function (value) {
      svg("line", { x1: M.left, x2: M.left + width, y1: y(value), y2: y(value),
        class: "grid" }, axes);
      text(axes, (value / unit[0]).toFixed(Math.min(decimals, 6)), {
        x: M.left - 8, y: y(value) + 4, "text-anchor": "end", class: "tick" });
    });
    svg("line", { x1: M.left, x2: M.left, y1: M.top, y2: M.top + height,
      class: "axis" }, axes);
    svg("line", { x1: M.left, x2: M.left + width, y1: M.top + height,
      y2: M.top + height, class: "axis" }, axes);
    var every = Math.max(1, Math.ceil(places / 14));
    plot.axis.forEach(function (place, i) {
      if (i % every !== 0 && i !== places - 1) return;
      var px = x(i);
      svg("line", { x1: px, x2: px, y1: M.top + height, y2: M.top + height + 5,
        class: "axis" }, axes);
      text(axes, placeLabel(place), { x: px, y: M.top + height + 16, "text-anchor": "end",
        class: "tick commit", transform: "rotate(-35 " + px + " " + (M.top + height + 16) + ")" });
    });
    text(axes, plot.title + " (" + unit[1] + ")", { x: 16, y: M.top + height / 2,
      "text-anchor": "middle", class: "label",
      transform: "rotate(-90 16 " + (M.top + height / 2) + ")" });
    text(axes, "commit (oldest first)", { x: M.left + width / 2, y: HEIGHT - 6,
      "text-anchor": "middle", class: "label" });

    // each device class: its interval band, its line, its points
    var points = [];
    plot.lines.forEach(function (line, li) {
      var group = svg("g", { class: "line", "data-device-class": line.deviceClass }, root);
      var banded = line.runs.filter(function (run) { return run.lo !== undefined; });
      if (banded.length) {
        var upper = banded.map(function (run) { return x(run.x) + "," + y(run.hi); });
        var lower = banded.slice().reverse().map(function (run) { return x(run.x) + "," + y(run.lo); });
        svg("polygon", { points: upper.concat(lower).join(" "), fill: line.colour,
          "fill-opacity": 0.14, class: "band" }, group);
        banded.forEach(function (run) {
          svg("line", { x1: x(run.x), x2: x(run.x), y1: y(run.lo), y2: y(run.hi),
            stroke: line.colour, class: "whisker" }, group);
        });
      }
      svg("polyline", { points: line.runs.map(function (run) { return x(run.x) + "," + y(run.v); })
        .join(" "), fill: "none", stroke: line.colour, class: "series" }, group);
      line.runs.forEach(function (run, ri) {
        var dot = svg("circle", { cx: x(run.x), cy: y(run.v), r: 3.6, fill: line.colour,
          class: "pt" + (run.verdict === "regression" ? " regressed" : ""),
          "data-line": li, "data-run": ri }, group);
        points.push({ x: x(run.x), y: y(run.v), line: line, run: run, dot: dot });
      });
    });

    // a drift: its straight line over the stretch it crept up on, over the lines
    plot.lines.forEach(function (line) {
      var drift = line.drift;
      if (!drift) return;
      var x0 = x(line.runs[drift.first].x);
      var x1 = x(line.runs[drift.last].x);
      var group = svg("g", { class: "drift" + (drift.acked ? " acked" : ""), tabindex: 0,
        role: "button", "data-change": drift.id, "aria-label": line.deviceClass + ": " + drift.text },
        root);
      svg("line", { x1: x0, x2: x1, y1: y(drift.from), y2: y(drift.to), class: "drift-line" }, group);
      svg("line", { x1: x0, x2: x1, y1: y(drift.from), y2: y(drift.to), class: "drift-hit" }, group);
      text(group, drift.text, { x: x1, y: y(drift.to) - 10, "text-anchor": "end",
        class: "drift-label" });
      var title = svg("title", {}, group);
      title.textContent = line.deviceClass + ": " + drift.text + " (click: kernels)";
    });

    // change points: a dashed line between the last good and first bad runs, a marker to click
    var markers = svg("g", { class: "change-points" }, root);
    var row = 0;
    plot.lines.forEach(function (line) {
      if (!line.changes.length) return;
      var ty = top - MARKER_ROW * (rows - row) - 2; // this class's row of markers
      row += 1;
      line.changes.forEach(function (change) {
        var mid = (x(line.runs[change.good].x) + x(line.runs[change.bad].x)) / 2;
        var colour = change.worse ? WORSE : BETTER;
        var group = svg("g", { class: "cp" + (change.acked ? " acked" : ""), tabindex: 0, role: "button",
          "data-change": change.id, "aria-label": line.deviceClass + ": " + change.text }, markers);
        svg("line", { x1: mid, x2: mid, y1: M.top, y2: M.top + height, stroke: colour,
          class: "cp-line" }, group);
        svg("line", { x1: mid, x2: mid, y1: ty, y2: M.top + height, class: "cp-hit" }, group);
        svg("circle", { cx: mid - 13, cy: ty + 6, r: 4, fill: line.colour, class: "cp-class" }, group);
        svg("path", { d: "M" + (mid - 7) + "," + ty + " h14 l-7,12 z", fill: colour,
          class: "cp-marker" }, group);
        text(group, change.change + (change.acked ? " ack" : ""), { x: mid + 9, y: ty + 10,
          fill: colour, class: "cp-label" });
        var title = svg("title", {}, group);
        title.textContent = line.deviceClass + ": " + change.text + " (click: kernels)";
      });
    });

    var ring = svg("circle", { r: 7, class: "hover-ring", visibility: "hidden" }, root);
    function nearest(event) {
      var matrix = root.getScreenCTM();
      if (!matrix) return null;
      var at = new DOMPoint(event.clientX, event.clientY).matrixTransform(matrix.inverse());
      var best = null;
      var bestDistance = HOVER_RADIUS;
      points.forEach(function (p) {
        var d = Math.hypot(p.x - at.x, p.y - at.y);
        if (d < bestDistance) {
          best = p;
          bestDistance = d;
        }
      });
      return best;
    }
    root.addEventListener("mousemove", function (event) {
      var p = nearest(event);
      if (!p) {
        hide();
        return;
      }
      ring.setAttribute("cx", p.x);
      ring.setAttribute("cy", p.y);
      ring.setAttribute("stroke", p.line.colour);
      ring.setAttribute("visibility", "visible");
      showTooltip(tooltip, p, event);
    });
    function hide() {
      ring.setAttribute("visibility", "hidden");
      tooltip.hidden = true;
    }
    root.addEventListener("mouseleave", hide);
    container.setAttribute("data-drawn", String(points.length));
  }

  function showTooltip(tooltip, p, event) {
    var run = p.run;
    tooltip.textContent = "";
    var rows = [
      ["", p.line.deviceClass],
      ["commit", run.commit ? run.commit.slice(0, 12) : "(none)"],
      ["date", run.date.replace("T", " ")],
      ["value", run.text + (run.interval ? " (" + run.interval + ")" : "")],
      ["verdict", run.verdict.toUpperCase()],
    ];
    if (run.sol) rows.push(["speed of light", run.sol]);
    rows.forEach(function (row) {
      var div = document.createElement("div");
      div.className = row[0] ? "row" : "row head";
      if (row[0]) {
        var key = document.createElement("span");
        key.className = "key";
        key.textContent = row[0] + " ";
        div.appendChild(key);
      }
      var value = document.createElement("span");
      value.className = row[0] === "verdict" ? "verdict " + run.verdict : "";
      value.textContent = row[1];
      div.appendChild(value);
      tooltip.appendChild(div);
    });
    tooltip.hidden = false;
    var left = event.pageX + 14;
    if (left + tooltip.offsetWidth > window.scrollX + document.documentElement.clientWidth) {
      left = event.pageX - 14 - tooltip.offsetWidth;
    }
    tooltip.style.left = left + "px";
    tooltip.style.top = event.pageY + 14 + "px";
  }

  function showChange(id) {
    var panel = document.getElementById(id);
    if (!panel) return;
    var section = panel.closest("section");
    section.querySelectorAll(".breakdown").forEach(function (other) {
      other.hidden = other !== panel;
    });
    section.querySelectorAll("[data-change]").forEach(function (node) {
      var selected = node.getAttribute("data-change") === id;
      node.classList.toggle("selected", selected);
      node.setAttribute("aria-pressed", String(selected));
    });
    panel.scrollIntoView({ block: "nearest" });
    if (window.location.hash !== "#" + id) {
      try {
        window.history.replaceState(null, "", "#" + id);
      } catch (ignored) {
        // a browser that refuses it for a file: the panel shows all the same
      }
    }
  }

  function testPage(data) {
    var tooltip = document.getElementById("tooltip");
    document.querySelectorAll(".plot[data-plot]").forEach(function (container) {
      drawPlot(container, data.plots[Number(container.getAttribute("data-plot"))], tooltip);
    });
    document.addEventListener("click", function (event) {
      var target = event.target.closest("[data-change]");
      if (target) showChange(target.getAttribute("data-change"));
    });
    var linked = document.getElementById(window.location.hash.slice(1));
    if (linked && linked.classList.contains("breakdown")) showChange(linked.id);
    document.addEventListener("keydown", function (event) {
      var target = event.target.closest && event.target.closest("g.cp, g.drift");
      if (target && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        showChange(target.getAttribute("data-change"));
      }
    });
  }

  function indexPage(filter) {
    filter.addEventListener("input", function () {
      var wanted = filter.value.trim().toLowerCase();
      document.querySelectorAll("tbody[data-test]").forEach(function (body) {
        body.hidden = wanted !== "" && body.getAttribute("data-test").toLowerCase().indexOf(wanted) < 0;
      });
    });
  }

  var data = document.getElementById("cudaperf-data");
  if (data) testPage(JSON.parse(data.textContent));
  var filter = document.getElementById("filter");
  if (filter) indexPage(filter);
})();
