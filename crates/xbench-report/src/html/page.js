(function () {
  'use strict';
  function each(list, f) { Array.prototype.forEach.call(list, f); }
  // Three significant digits, as xbench writes figures; thousands grouped from 100 up.
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) { return '-'; }
    var a = Math.abs(v);
    if (a >= 99.95) { return Math.round(v).toLocaleString('en-US'); }
    if (a === 0) { return '0'; }
    return v.toPrecision(3);
  }
  function xLabel(panel, x) {
    if (panel.x && panel.x.cats) { return panel.x.cats[Math.round(x)]; }
    if (panel.x === 'nines') { return 'p' + fmt(100 * (1 - Math.pow(10, -x))); }
    return fmt(x);
  }
  function line(tip, text, bold) {
    var e = document.createElement(bold ? 'b' : 'span');
    e.textContent = text;
    tip.appendChild(e);
    if (!bold) { tip.appendChild(document.createElement('br')); }
  }

  each(document.querySelectorAll('figure.chart'), function (fig) {
    var blob = fig.querySelector('script.pts');
    if (!blob) { return; }
    var data = JSON.parse(blob.textContent);
    var hidden = {};
    each(fig.querySelectorAll('.key .k'), function (b) {
      b.addEventListener('click', function () {
        var s = b.getAttribute('data-s');
        var on = b.getAttribute('aria-pressed') !== 'true';
        b.setAttribute('aria-pressed', on ? 'true' : 'false');
        hidden[s] = !on;
        each(fig.querySelectorAll('g.s[data-s="' + s + '"]'), function (g) {
          g.classList.toggle('off', !on);
        });
      });
    });
    each(fig.querySelectorAll('.plot'), function (plot, pi) {
      var panel = data.panels[pi];
      var tip = plot.querySelector('.tip');
      if (!panel || !tip) { return; }
      var current = null;
      function visible() {
        var out = [];
        each(panel.s, function (ser) { if (!hidden[ser[0]] && ser[1].length) { out.push(ser); } });
        return out;
      }
      function shownSvg() {
        var svgs = plot.querySelectorAll('svg');
        for (var i = 0; i < svgs.length; i++) { if (svgs[i].getBoundingClientRect().width > 0) { return svgs[i]; } }
        return null;
      }
      function mapper(svg) {
        var m = svg.getAttribute('data-map').split(' ').map(Number);
        var ly0 = Math.log(m[6]) / Math.LN10, ly1 = Math.log(m[7]) / Math.LN10;
        return {
          x: function (x) { return m[0] + (x - m[4]) / (m[5] - m[4]) * m[2]; },
          y: function (y) {
            var f = m[8] ? (Math.log(Math.max(y, m[6])) / Math.LN10 - ly0) / (ly1 - ly0) : (y - m[6]) / (m[7] - m[6]);
            return m[1] + (1 - f) * m[3];
          }
        };
      }
      function hide() {
        tip.hidden = true;
        each(plot.querySelectorAll('.hl'), function (h) { h.setAttribute('cx', -99); h.setAttribute('cy', -99); });
      }
      function show(svg, ser, q) {
        var map = mapper(svg);
        var hl = svg.querySelector('.hl');
        var cx = map.x(q[0]), cy = map.y(q[1]);
        hl.setAttribute('cx', cx);
        hl.setAttribute('cy', cy);
        while (tip.firstChild) { tip.removeChild(tip.firstChild); }
        line(tip, data.names[ser[0]], true);
        line(tip, panel.xd + ': ' + xLabel(panel, q[0]));
        line(tip, fmt(q[1]) + ' ' + panel.u);
        if (q[2] !== null && q[3] !== null) { line(tip, '95 % CI ' + fmt(q[2]) + '–' + fmt(q[3])); }
        if (q[4] !== null) { line(tip, (panel.nof === 'runs' ? 'n = ' : 'of ') + q[4].toLocaleString('en-US') + ' ' + panel.nof); }
        tip.hidden = false;
        var ctm = svg.getScreenCTM();
        var box = plot.getBoundingClientRect();
        var p = svg.createSVGPoint();
        p.x = cx; p.y = cy;
        p = p.matrixTransform(ctm);
        var left = p.x - box.left + 12, top = p.y - box.top + 12;
        if (left + tip.offsetWidth > box.width) { left = Math.max(0, p.x - box.left - tip.offsetWidth - 12); }
        tip.style.left = left + 'px';
        tip.style.top = top + 'px';
      }
      each(plot.querySelectorAll('svg'), function (svg) {
        svg.addEventListener('mousemove', function (ev) {
          var ctm = svg.getScreenCTM();
          if (!ctm) { return; }
          var p = svg.createSVGPoint();
          p.x = ev.clientX; p.y = ev.clientY;
          p = p.matrixTransform(ctm.inverse());
          var map = mapper(svg), best = null, bd = Infinity;
          each(visible(), function (ser) {
            each(ser[1], function (q) {
              var dx = map.x(q[0]) - p.x, dy = map.y(q[1]) - p.y, d = dx * dx + dy * dy;
              if (d < bd) { bd = d; best = [ser, q]; }
            });
          });
          if (!best || bd > 1600) { hide(); return; }
          show(svg, best[0], best[1]);
        });
        svg.addEventListener('mouseleave', hide);
      });
      // The keyboard's way to the same figures: arrows step through points and lines.
      plot.setAttribute('tabindex', '0');
      plot.setAttribute('aria-label', 'Chart points: left and right arrows step through a line\'s points, up and down change lines');
      plot.addEventListener('keydown', function (ev) {
        var lines = visible();
        if (!lines.length) { return; }
        var k = ev.key;
        if (k !== 'ArrowLeft' && k !== 'ArrowRight' && k !== 'ArrowUp' && k !== 'ArrowDown' && k !== 'Escape') { return; }
        ev.preventDefault();
        if (k === 'Escape') { current = null; hide(); return; }
        if (!current) { current = { s: 0, p: 0 }; } else if (k === 'ArrowRight') { current.p++; } else if (k === 'ArrowLeft') { current.p--; } else if (k === 'ArrowDown') { current.s++; } else { current.s--; }
        current.s = (current.s + lines.length) % lines.length;
        var pts = lines[current.s][1];
        current.p = Math.max(0, Math.min(pts.length - 1, current.p));
        var svg = shownSvg();
        if (svg) { show(svg, lines[current.s], pts[current.p]); }
      });
      plot.addEventListener('blur', function () { current = null; hide(); });
    });
  });

  each(document.querySelectorAll('table.sortable'), function (t) {
    var heads = t.querySelectorAll('thead th');
    each(heads, function (th, col) {
      var b = th.querySelector('button');
      if (!b) { return; }
      b.addEventListener('click', function () {
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        each(heads, function (o) { o.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var body = t.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var a = r1.cells[col], c = r2.cells[col];
          var va = a.getAttribute('data-v'), vc = c.getAttribute('data-v');
          var d;
          if (va !== null && vc !== null) { d = Number(va) - Number(vc); } else if (va !== null) { return -1; } else if (vc !== null) { return 1; } else { d = a.textContent.localeCompare(c.textContent, 'en', { numeric: true }); }
          return asc ? d : -d;
        });
        each(rows, function (r) { body.appendChild(r); });
      });
    });
  });

  // A printout shows every run list, which the screen keeps folded.
  window.addEventListener('beforeprint', function () {
    each(document.querySelectorAll('details'), function (d) { d.open = true; });
  });
}());
