// The dashboard page. Every value from the server is put into the page as text
// (textContent, attributes through dataset/setAttribute), never parsed as HTML.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const state = { version: null, key: "", names: [], steps: [], states: "", cells: [],
                  legend: [], selected: null, view: null, detailsTimer: 0 };

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function setText(id, text) { $(id).textContent = text === undefined || text === null ? "" : String(text); }
  function dur(seconds) {
    if (seconds === null || seconds === undefined) return "";
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + "s";
    const m = Math.floor(seconds / 60), s = seconds % 60;
    if (m < 60) return m + "m" + String(s).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }
  function when(text) {
    if (!text) return "";
    const d = new Date(text);
    return isNaN(d) ? String(text) : d.toISOString().replace("T", " ").replace(".000Z", "Z");
  }
  const secs = (a, b) => (new Date(b) - new Date(a)) / 1000;

  // ---------------------------------------------------------------- header
  function renderHeader(view) {
    const h = view.header;
    setText("cluster", view.cluster);
    setText("object", "ClusterOperator " + view.object);
    document.title = view.cluster + ": " + h.phase + " " + h.step;
    setText("phase", h.phase + (h.rollingBack ? " (rolling back)" : ""));
    setText("step", (h.step || "0") + " " + (h.stepState || ""));
    setText("versions", (h.oldVersion || "?") + " -> " + (h.newVersion || "?"));
    setText("on-new", h.nodesOnNew + "/" + h.nodesTotal);
    setText("failures", h.failures + " (fallback at " + h.maxFailures + ")");
    const p = h.prediction;
    setText("predicted", !p ? "-" : !p.at ? p.note : when(p.at) + " (in " +
      dur(p.remainingSeconds) + ")" + (p.gatesLeft ? " + " + p.gatesLeft + " gate(s)" : ""));
    if (p) $("predicted").title = p.note + "; install time " + p.installSeconds + " s";
    setText("message", h.message);
    const err = $("error");
    err.hidden = !view.error;
    err.textContent = view.error || "";
  }

  // ---------------------------------------------------------------- waiting
  function renderWaiting(view) {
    const list = $("waiting");
    clear(list);
    if (!view.waiting.length) { list.appendChild(el("li", "nothing", "none")); return; }
    for (const w of view.waiting) {
      const li = el("li");
      li.dataset.kind = w.kind;
      li.appendChild(el("div", w.title, "title"));
      if (w.detail) li.appendChild(el("div", w.detail, "detail"));
      if (w.until) li.appendChild(el("div", "until " + when(w.until), "until"));
      if (w.action) li.appendChild(el("div", "action: " + w.action, "action"));
      if (w.change) {
        const c = w.change;
        const pre = el("pre", (c.path || "") + (c.line ? ":" + c.line : "") + "\n- " +
          c.before + "\n+ " + c.after, "change");
        li.appendChild(pre);
      }
      if (w.items && w.items.length) {
        const ul = el("ul", null, "items");
        for (const item of w.items.slice(0, 200)) ul.appendChild(el("li", item));
        if (w.items.length > 200) ul.appendChild(el("li", "and " + (w.items.length - 200) + " more"));
        li.appendChild(ul);
      }
      list.appendChild(li);
    }
  }

  // ---------------------------------------------------------------- map
  // the map's groups: by step, or by topology domain when the rollout has a topology key
  // (fleet.domains: each node's index in view.domains, -1 for nodes not in the rollout)
  function buildMap(fleet) {
    const map = $("map");
    clear(map);
    state.cells = new Array(fleet.names.length);
    const byDomain = Array.isArray(fleet.domains);
    let group = null, cells = null, current = null;
    const frag = document.createDocumentFragment();
    for (let i = 0; i < fleet.names.length; i++) {
      const at = byDomain ? fleet.domains[i] : fleet.steps[i];
      if (at !== current) {
        current = at;
        group = el("div", null, "group");
        if (byDomain) group.dataset.domain = String(at);
        else group.dataset.step = String(at);
        group.appendChild(el("h3", byDomain ? "" : at ? "step " + at : "nodes"));
        cells = el("div", null, "cells");
        group.appendChild(cells);
        frag.appendChild(group);
      }
      const cell = document.createElement("i");
      cell.dataset.node = fleet.names[i];
      cell.dataset.i = String(i);
      cells.appendChild(cell);
      state.cells[i] = cell;
    }
    map.appendChild(frag);
    state.states = "";
  }

  // each domain group's title: the domain and its progress (live)
  function renderDomains(view) {
    const domains = view.domains || [];
    for (const h3 of document.querySelectorAll("#map .group[data-domain] > h3")) {
      const index = Number(h3.parentNode.dataset.domain);
      const d = domains[index];
      if (!d) { h3.textContent = "not in the rollout"; continue; }
      const parts = [d.upgraded + "/" + d.nodes + " upgraded"];
      if (d.inFlight) parts.push(d.inFlight + " in flight");
      if (d.draining) parts.push(d.draining + " draining");
      if (d.failed) parts.push(d.failed + " failed");
      if (d.skipped) parts.push(d.skipped + " skipped");
      if (d.unavailable) parts.push(d.unavailable + " unavailable");
      if (d.done) parts.push("done");
      h3.textContent = d.name + ": " + parts.join(", ");
    }
  }

  // nodes being drained: the pods still to evict, the budgets that hold them (docs/live-clusters.md#the-drain)
  function renderDraining(view) {
    const section = $("draining-section");
    const rows = view.draining || [];
    section.hidden = !rows.length;
    const body = $("draining").tBodies[0];
    clear(body);
    for (const d of rows) {
      const tr = el("tr");
      tr.dataset.node = d.node;
      for (const c of [d.node, when(d.since), (d.pods || []).join(", "),
        (d.budgets || []).join(", "), (d.waitingFor || []).join(", ")]) tr.appendChild(el("td", c));
      body.appendChild(tr);
    }
    const skipped = view.skipped || [];
    $("skipped-section").hidden = !skipped.length;
    setText("skipped", skipped.length + ": " + skipped.join(", "));
  }

  function paintMap(fleet) {
    const s = fleet.states, old = state.states, legend = state.legend;
    for (let i = 0; i < s.length; i++) {
      if (s.charCodeAt(i) !== old.charCodeAt(i)) {
        const code = s.charCodeAt(i) - 48;
        const cell = state.cells[i];
        cell.className = "s" + code + (state.selected === i ? " sel" : "");
        cell.dataset.state = legend[code];
      }
    }
    state.states = s;
  }

  function renderLegend(fleet) {
    const ul = $("legend");
    clear(ul);
    const colors = getComputedStyle(document.documentElement);
    for (const name of fleet.legend) {
      const li = el("li");
      li.dataset.state = name;
      li.style.setProperty("--c", colors.getPropertyValue("--" + name));
      li.appendChild(el("span", name + " ", "label"));
      li.appendChild(el("b", fleet.counts[name] || 0, "n"));
      ul.appendChild(li);
    }
  }

  function showDetails(i, pinned) {
    const box = $("details");
    if (i === null) { box.hidden = true; return; }
    const name = state.names[i];
    const code = state.states.charCodeAt(i) - 48;
    const fill = (row) => {
      clear(box);
      box.dataset.node = name;
      box.appendChild(el("strong", name, "name"));
      const dl = el("dl");
      const add = (k, v) => { if (v === "" || v === null || v === undefined) return;
        dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); };
      add("state", row ? row.state : state.legend[code]);
      add("step", row ? row.step : state.steps[i]);
      if (row) {
        add("since", when(row.since));
        add("version", row.version);
        add("driver pod", row.pod);
        add("pod reason", row.pod_reason);
        add("failure", row.failure_reason);
        add("failures this batch", row.failures || "");
        add("attempt", row.attempt || "");
        add("busy pods", (row.busy_pods || []).join(", "));
        if (row.domain !== null && row.domain !== undefined) add("domain", row.domain);
        if (row.drain) {
          add("evicting", (row.drain.pods || []).join(", "));
          add("held by budgets", (row.drain.budgets || []).join(", "));
          add("waiting for", (row.drain.waitingFor || []).join(", "));
        }
        for (const [check, value] of row.health || []) add(check, value);
      }
      box.appendChild(dl);
      if (pinned) box.appendChild(el("div", "tap elsewhere to close", "hint"));
      box.hidden = false;
    };
    fill(null);
    // the full details once the pointer rests on the cell (not for every cell it crosses)
    clearTimeout(state.detailsTimer);
    state.detailsTimer = setTimeout(() => {
      if (box.dataset.node !== name) return;
      fetch("/api/node?name=" + encodeURIComponent(name), { cache: "no-store" })
        .then((r) => r.ok ? r.json() : null)
        .then((row) => { if (row && box.dataset.node === name) fill(row); })
        .catch(() => {});
    }, pinned ? 0 : 60);
  }

  function cellIndex(target) {
    return target && target.dataset && target.dataset.i !== undefined ? Number(target.dataset.i) : null;
  }
  // a live update that changes the height of what is above the map (the waiting list) moves the
  // cells under a pointer at rest: the browser then reports another cell, or leaving the map,
  // though the person pointed at nothing new; such events keep the details as they are
  let pointer = null;
  const atRest = (e) => pointer !== null && Math.abs(pointer.x - e.clientX) < 1 &&
    Math.abs(pointer.y - e.clientY) < 1;
  $("map").addEventListener("mouseover", (e) => {
    if (atRest(e)) return;
    pointer = { x: e.clientX, y: e.clientY };
    const i = cellIndex(e.target);
    if (i !== null && state.selected === null) showDetails(i, false);
  });
  $("map").addEventListener("mouseleave", (e) => {
    if (atRest(e)) return;
    pointer = null;
    if (state.selected === null) showDetails(null);
  });
  document.addEventListener("click", (e) => {
    const i = cellIndex(e.target);
    if (state.selected !== null && state.cells[state.selected]) {
      state.cells[state.selected].classList.remove("sel");
    }
    state.selected = i;
    if (i !== null) state.cells[i].classList.add("sel");
    showDetails(i, true);
  });

  // ---------------------------------------------------------------- steps
  function renderSteps(view) {
    const body = $("steps").tBodies[0];
    clear(body);
    const now = view.generatedAt;
    for (const s of view.steps) {
      const tr = el("tr", null, s.state);
      tr.dataset.step = String(s.step);
      let took = "";
      if (s.started_at && s.ended_at) took = dur(secs(s.started_at, s.ended_at));
      else if (s.started_at) took = dur(secs(s.started_at, now)) + " so far";
      if (s.predicted_seconds !== null && s.state !== "done") {
        took += (took ? " / " : "") + "predicted " + dur(s.predicted_seconds);
      }
      const upgraded = (s.counts.upgraded || 0) + (s.counts.verifying || 0);
      const tolerated = s.counts.tolerated || 0;
      // failures the step tolerates, and how many of its nodes it left behind
      const tolerates = s.toleration ? s.toleration + (tolerated ? " (" + tolerated +
        " left behind)" : "") : "0";
      const cells = [s.step, s.target, s.nodes, tolerates, s.gate ? "gate (a person)" : s.pause,
        s.state, when(s.started_at), took];
      for (const c of cells) tr.appendChild(el("td", c));
      const td = el("td"), bar = el("div", null, "bar"), fill = el("span");
      fill.style.width = (s.nodes ? Math.min(100, 100 * upgraded / s.nodes) : 0) + "%";
      bar.appendChild(fill);
      bar.title = upgraded + "/" + s.nodes + " upgraded" +
        (tolerated ? ", " + tolerated + " tolerated" : "");
      td.appendChild(bar);
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  // ---------------------------------------------------------------- audit
  function renderAudit(view) {
    const section = $("audit-section");
    if (!view.audit) { section.hidden = true; return; }
    section.hidden = false;
    const body = $("audit").tBodies[0];
    clear(body);
    for (const a of view.audit.slice(0, 300)) {
      const tr = el("tr");
      tr.dataset.kind = a.kind;
      tr.appendChild(el("td", when(new Date(a.at * 1000).toISOString())));
      tr.appendChild(el("td", a.kind + (a.detail ? ": " + a.detail : ""), "kind"));
      tr.appendChild(el("td", a.short));
      tr.appendChild(el("td", a.subject));
      tr.appendChild(el("td", a.author));
      tr.appendChild(el("td", a.mergedBy || ""));
      body.appendChild(tr);
    }
  }

  // ---------------------------------------------------------------- loop
  function apply(data) {
    const started = performance.now();
    const view = data.view, fleet = view.fleet;
    if (fleet.names) {
      state.names = fleet.names; state.steps = fleet.steps; state.key = fleet.key;
      state.legend = fleet.legend;
      buildMap(fleet);
    }
    renderHeader(view);
    renderLegend(fleet);
    paintMap(fleet);
    renderDomains(view);
    renderWaiting(view);
    renderDraining(view);
    renderSteps(view);
    renderAudit(view);
    state.version = data.version;
    state.view = view;
    document.body.dataset.version = String(data.version);
    // for the benchmark: when this version was on the page, and what applying it cost
    const done = performance.now();
    document.body.dataset.rendered = String(done);
    document.body.dataset.appliedAt = String(performance.timeOrigin + done);
    document.body.dataset.applyMs = String(done - started);
  }

  async function poll() {
    for (;;) {
      const url = "/api/view?" + (state.version === null ? "" : "after=" + state.version +
        "&have=" + encodeURIComponent(state.key));
      try {
        const r = await fetch(url, { cache: "no-store" });
        if (!r.ok) throw new Error("HTTP " + r.status);
        const data = await r.json();
        if (data.version !== state.version || data.view.fleet.names) apply(data);
        document.body.className = "live";
        setText("live-text", "live, updated " + when(data.view.generatedAt));
      } catch (err) {
        document.body.className = "stale";
        setText("live-text", "disconnected (" + err.message + "); retrying");
        await new Promise((ok) => setTimeout(ok, 1000));
      }
    }
  }
  poll();
})();
