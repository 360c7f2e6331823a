// holdfast status page: reads GET /api/status every two seconds and acts
// through the admin API. No framework; everything from the server reaches
// the page as text (textContent), never as markup.
"use strict";

(function () {
  const TOKEN_KEY = "holdfast.admin.token";
  const REFRESH_MS = 2000;
  const $ = (id) => document.getElementById(id);

  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let timer = null;
  let pending = null; // the action waiting for confirmation
  let awaiting = null; // the confirmed action waiting for a credential, or true when the page itself needs one

  function headers() {
    const h = { "Accept": "application/json" };
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }

  async function api(method, path) {
    const resp = await fetch(path, { method: method, headers: headers(), cache: "no-store", credentials: "omit" });
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const err = new Error((body && body.error) || (resp.status + " " + resp.statusText));
      err.status = resp.status;
      err.localTokenPath = (body && body.local_token_path) || "";
      throw err;
    }
    return body;
  }

  // ---- formatting

  function fmtSec(s) {
    if (s == null) return "–";
    if (s < 0.001) return s === 0 ? "0" : "<1ms";
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + "s";
    const m = Math.floor(s / 60), r = Math.floor(s % 60);
    if (m < 60) return m + "m" + String(r).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }
  function fmtRate(v) { return v === 0 ? "0" : v < 0.01 ? "<0.01" : v.toFixed(2); }
  function fmtPct(v) { return (v === 0 ? "0" : v * 100 < 1 ? "<1" : Math.round(v * 100)) + "%"; }
  function fmtNum(v) { return v >= 100 ? Math.round(v).toString() : v >= 10 ? v.toFixed(1) : v.toFixed(2).replace(/\.?0+$/, "") || "0"; }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "class") e.className = attrs[k];
      else if (k.startsWith("data-")) e.setAttribute(k, attrs[k]);
      else e[k] = attrs[k];
    }
    for (const c of kids) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function td(text, cls) { return el("td", cls ? { class: cls } : null, text); }
  function button(label, action, tag, cls) {
    return el("button", { type: "button", class: cls || "", "data-action": action, "data-tag": tag, title: label + " " + tag }, label);
  }
  function fill(tbody, rows) { tbody.replaceChildren(...rows); }

  // A sparkline of shares (0..1) of the pool, oldest first.
  function sparkline(points, title) {
    const NS = "http://www.w3.org/2000/svg", w = 120, h = 24;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("class", "spark");
    const t = document.createElementNS(NS, "title");
    t.textContent = title;
    svg.append(t);
    const base = document.createElementNS(NS, "line");
    base.setAttribute("x1", 0); base.setAttribute("x2", w); base.setAttribute("y1", h - 0.5); base.setAttribute("y2", h - 0.5);
    base.setAttribute("class", "spark-base");
    svg.append(base);
    if (points.length > 0) {
      const n = points.length, step = n > 1 ? w / (n - 1) : 0;
      const xy = points.map((v, i) => (n > 1 ? i * step : w).toFixed(1) + "," + (h - 1 - Math.min(Math.max(v, 0), 1) * (h - 2)).toFixed(1));
      if (n === 1) xy.unshift("0," + xy[0].split(",")[1]);
      const area = document.createElementNS(NS, "polygon");
      area.setAttribute("points", (n > 1 ? "0" : "0") + "," + h + " " + xy.join(" ") + " " + w + "," + h);
      area.setAttribute("class", "spark-area");
      const line = document.createElementNS(NS, "polyline");
      line.setAttribute("points", xy.join(" "));
      line.setAttribute("class", "spark-line");
      svg.append(area, line);
    }
    return svg;
  }

  // ---- rendering

  function render(s) {
    $("main").hidden = false;
    $("token-form").hidden = !awaiting;
    $("forget-token").hidden = !token;
    $("where").textContent = location.host;
    $("version").textContent = s.version || "";
    const rd = s.readiness || { ready: true, unmet: [] };
    $("readiness").textContent = rd.ready ? "ready" : "not ready: " + rd.unmet.join("; ");
    $("readiness").title = rd.ready ? "GET /readyz answers 200" : "GET /readyz answers 503";
    $("updated").textContent = "updated " + new Date(s.time).toLocaleTimeString();
    $("live").className = "dot ok";

    const p = s.pool;
    $("pool-in-use").textContent = p.in_use + " / " + p.max + " in use";
    const bar = $("pool-bar");
    bar.style.width = Math.min(100, p.saturation * 100).toFixed(0) + "%";
    bar.className = p.saturation >= 0.9 ? "hot" : p.saturation >= 0.7 ? "warm" : "";
    $("pool-detail").textContent = p.open + " open, " + p.idle + " idle · " + fmtPct(p.saturation) + " saturated" +
      (s.window_seconds > 0 ? " · " + p.timeouts_in_window + " timeouts, " + p.rejected_in_window + " rejected in the last " + fmtSec(s.window_seconds) : "");
    $("waiting-total").textContent = String(p.waiting);
    $("waiting-detail").textContent = p.waiting_pool + " for the pool, " + p.waiting_tag_limit + " under tag limits, " +
      p.waiting_pipeline + " for a pipeline place · " + fmtRate(p.wait_rate) + " waiting on average";
    $("clients").textContent = String(p.clients);
    $("clients-detail").textContent = s.holders_total + " holding a connection (" + s.holders_in_transaction + " in a transaction) · " +
      p.pinned_sessions + " pinned";

    renderTags(s);
    renderGates(s);
    renderHere(s);
    renderHolders(s);
    renderEngine(s);
    renderFleet(s);
    renderOverload(s);
    renderReplicas(s);
    renderTopology(s);
  }

  // Which server is the primary: its address, or no primary / split brain,
  // each server's role, the switchovers seen, the statements held now and
  // since start (retried, refused with 9010, held by a pause), the hold's
  // settings, and any pause in force.
  function renderTopology(s) {
    const t = s.topology;
    $("card-topology").hidden = !t;
    if (!t) return;
    const since = t.since && !t.since.startsWith("0001") ? " since " + new Date(t.since).toLocaleTimeString() : "";
    $("topology-state").textContent =
      t.state === "primary" ? (t.primary_addresses || []).join(", ") :
      t.state === "no_primary" ? "no primary" + since :
      t.state === "split_brain" ? "SPLIT BRAIN" + since : "not checked yet";
    $("card-topology").className = "card " + (t.state === "split_brain" ? "bad" : t.state === "no_primary" ? "bad" : "");
    $("topology-detail").textContent = (t.servers || []).map((x) => x.address + ": " + x.role.replace("_", " ") +
      (x.retired ? " (retired)" : "") + (x.replicates_from ? " from " + x.replicates_from : "") +
      (x.error && !x.reachable ? " — " + x.error : "")).join(" · ") +
      " · " + t.primary_changes + " switchovers seen, " + fmtSec(t.no_primary_seconds) + " without a primary, " +
      t.retired_connections + " connections retired";
    const f = t.failover || {}, pauses = t.pauses || [];
    const held = (f.held_now || 0) + " statements held now · since start " + (f.held || 0) + " held (" +
      fmtSec(f.held_seconds || 0) + " in all), " + (f.retried || 0) + " retried, " + (f.refused || 0) + " refused with 9010, " +
      (f.pause_waits || 0) + " pause waits" +
      (f.transactions_replayed || f.transaction_replays_failed ? ", " + (f.transactions_replayed || 0) + " transactions replayed (" +
        (f.transaction_replays_failed || 0) + " replays failed)" : "") +
      (t.hold ? " · hold " + fmtSec(t.hold.seconds) + ", at most " + t.hold.max_held + " held" : "") +
      (pauses.length ? " · PAUSED: " + pauses.map((p) => p.tag + " (" + p.source + (p.reason ? ", " + p.reason : "") + ")").join(", ") : "");
    $("topology-held").textContent = held;
    if (t.state === "primary" && ((f.held_now || 0) > 0 || pauses.length > 0)) $("card-topology").className = "card warn";
  }

  // backend.replicas: how many get reads, each one's lag and reads.
  function renderReplicas(s) {
    const rs = s.replicas || [];
    $("card-replicas").hidden = rs.length === 0;
    if (rs.length === 0) return;
    const up = rs.filter((r) => r.in_service).length;
    $("replicas-state").textContent = up + " / " + rs.length + " in service";
    $("card-replicas").className = "card " + (up === 0 ? "bad" : up < rs.length ? "warn" : "");
    $("replicas-detail").textContent = rs.map((r) => r.address + ": " + (r.in_service ? "lag " + fmtSec(r.lag_seconds) : r.reason) +
      ", " + r.reads_routed + " reads (" + r.reads_fell_back + " to the primary)" +
      ((r.tags || []).length ? ", held most by " + r.tags.slice(0, 3).map((t) => t.tag + " " + fmtSec(t.hold_seconds)).join(", ") : "")).join(" · ");
  }

  // The overload classes' counts since start: borrows admitted, shed
  // (background, error 9006), and critical waits past their budget.
  function renderOverload(s) {
    const by = {};
    for (const c of s.classes) by[c.class] = c;
    const crit = by.critical || {}, bg = by.background || {};
    const shed = bg.shed || 0, over = crit.over_budget || 0;
    $("overload-state").textContent = shed > 0 ? shed + " shed" : "nothing shed";
    $("card-overload").className = "card " + (over > 0 ? "bad" : shed > 0 ? "warn" : "");
    $("overload-detail").textContent = s.classes.map((c) => c.class + " " + c.admitted + " admitted, wait p99 " +
      (c.wait_p99_seconds < 0 ? "> 60s" : "≤ " + fmtSec(c.wait_p99_seconds)) + (c.shed > 0 ? ", " + c.shed + " shed" : "") +
      (c.class === "critical" ? ", " + c.over_budget + " over budget" : "")).join(" · ") + " (since start)";
  }

  function controlText(c) {
    if (c.shown && !c.tag.startsWith("shape/")) return c.shown;
    if (c.tag.startsWith("shape/")) {
      return c.kind === "drain" ? "statements blocked (9007)" : "at most " + c.value + " statements running fleet-wide";
    }
    switch (c.kind) {
      case "drain": return "drained" + (c.value > 0 ? " (grace " + fmtSec(c.value / 1000) + ")" : "");
      case "limit": return "at most " + c.value + " connections fleet-wide";
      case "max_txn": return "transactions at most " + fmtSec(c.value / 1000);
      case "class": return "class " + (["critical", "normal", "background"][c.value] || c.value);
      case "route": return "reads: " + (["primary", "replica", "replica_stale_ok"][c.value] || c.value);
      default: return c.kind + " " + c.value;
    }
  }

  // A control's author: the credential's name, then "/" and the caller's
  // own word, which nothing verified.
  function setByText(setBy) { return setBy.includes("/") ? setBy + " (by unverified)" : setBy; }

  // where a control set from this page takes effect
  let scope = "on this holdfast instance";

  function renderFleet(s) {
    const f = s.fleet;
    scope = f && !f.no_schema ? "on every holdfast instance of the fleet (within " + fmtSec(2 * f.poll_seconds) + ")" : "on this holdfast instance";
    if (!f) {
      $("fleet-state").textContent = "off";
      $("fleet-detail").textContent = "fleet.disabled: controls apply to this instance only";
      $("card-fleet").className = "card";
      $("fleet").hidden = true;
      return;
    }
    $("fleet").hidden = false;
    const over = [];
    if (f.sizing.connections_overcommitted) over.push("Σ pool.max " + f.sizing.pool_max_sum + " > " + f.sizing.pool_max_limit + " (max_connections less the reserve)");
    if (f.sizing.statements_overcommitted) over.push("statement budgets " + f.sizing.stmt_budget_sum + " > " + f.sizing.stmt_budget_limit);
    let state, cls = "";
    if (f.no_schema) { state = "this instance only"; cls = "warn"; }
    else if (!f.known) { state = "controls not read yet"; cls = "bad"; }
    else if (f.stale) { state = "controls stale"; cls = "bad"; }
    else state = f.instances + (f.instances === 1 ? " instance" : " instances");
    if (over.length > 0 && cls === "") cls = "warn";
    $("fleet-state").textContent = state;
    $("card-fleet").className = "card " + cls;
    const detail = [];
    if (f.no_schema) detail.push("the fleet's tables are missing: run holdfast migrate");
    else if (f.stale || !f.known) detail.push("cannot read the controls (" + (f.error || "unknown error") + "); " +
      (f.known ? "keeping those read " + fmtSec(f.read_age_seconds) + " ago" : "none known yet"));
    else detail.push("controls read " + fmtSec(f.read_age_seconds) + " ago, every " + fmtSec(f.poll_seconds));
    if (f.duties.length > 0) detail.push("runs " + f.duties.join(", "));
    detail.push(...over);
    $("fleet-detail").textContent = detail.join(" · ");
    const rows = f.controls.map((c) => el("tr", { "data-tag": c.tag, "data-kind": c.kind },
      td(c.tag, "tag"), td(controlText(c)), td(setByText(c.set_by)), td(c.reason || "–"),
      td(new Date(c.set_at).toLocaleString()), td(c.expires_at ? new Date(c.expires_at).toLocaleString() : "until lifted")));
    fill($("fleet-controls").tBodies[0], rows);
    $("fleet-controls").hidden = rows.length === 0;
    $("fleet-note").textContent = rows.length === 0 ? "none" : "";
  }

  function renderTags(s) {
    $("tags-window").textContent = s.window_seconds > 0 ? "rates over the last " + fmtSec(s.window_seconds) :
      "rates appear after the next sample";
    const rows = s.tags.map((t) => {
      const state = [];
      if (t.drained) state.push("drained");
      if (t.limited) state.push("limit " + t.limit + (t.waiting > 0 ? " (" + t.waiting + " queued)" : ""));
      if (t.class && t.class !== "normal") state.push(t.class);
      if (t.shed > 0) state.push(t.shed + " shed");
      const mins = Math.round(t.history.length * s.sample_seconds / 60);
      const spark = sparkline(t.history, t.tag + ": share of the pool over the last " + (mins || "<1") + " min");
      const actions = el("td", { class: "actions" },
        t.drained ? button("Undrain", "undrain", t.tag) : button("Drain", "drain", t.tag, "danger"),
        t.limited ? button("Lift limit", "unlimit", t.tag) : button("Limit", "limit", t.tag),
        button("Read-only", "readonly", t.tag));
      const row = el("tr", { "data-tag": t.tag, class: t.drained ? "drained" : "" },
        td(t.tag, "tag"), td(t.held_now, "num"), td(fmtRate(t.hold_rate), "num"), td(fmtPct(t.pool_share), "num"),
        el("td", null, spark), td(fmtRate(t.wait_rate), "num"), td(fmtPct(t.idle_in_transaction_share), "num"),
        td(fmtNum(t.statements_per_second), "num"), td(t.slow_transactions + " / " + t.slow_transactions_total, "num"),
        td(t.oldest_hold_seconds > 0 ? fmtSec(t.oldest_hold_seconds) : "–", "num"),
        td(state.join(", ") || "–"), actions);
      return row;
    });
    fill($("tags").tBodies[0], rows);
    const notes = [];
    if (rows.length === 0) notes.push("no tag held, waited for or ran anything recently");
    if (s.more_tags > 0) notes.push(s.more_tags + " more active tags not shown");
    if (s.folded > 0) notes.push(s.folded + " tag lookups folded into \"other\" (attribution.max_tags)");
    $("tags-note").textContent = notes.join(" · ");
  }

  function renderGates(s) {
    const rows = s.gates.map((g) => el("tr", { "data-tag": g.tag },
      td(g.tag, "tag"), td(g.drained ? new Date(g.drained_at).toLocaleString() : "–"),
      td([g.reason, g.limit_reason].filter(Boolean).join(" · ") || "–"),
      td(g.limited ? g.limit : "–", "num"), td(g.in_use, "num"), td(g.waiting, "num"),
      el("td", { class: "actions" },
        g.drained ? button("Undrain", "undrain", g.tag) : "",
        g.limited ? button("Lift limit", "unlimit", g.tag) : "")));
    fill($("gates").tBodies[0], rows);
    $("gates").hidden = rows.length === 0;
    $("gates-note").textContent = rows.length === 0 ? "none: every tag may borrow freely" : "";
  }

  // Every control in force on this instance, whatever its kind and
  // source; a local or fleet one may be lifted from here.
  function renderHere(s) {
    const rows = (s.controls_here || []).map((c) => el("tr", { "data-tag": c.tag, "data-kind": c.kind },
      td(c.tag, "tag"), td(controlText(c)), td(c.source), td(c.reason || "–"), td(c.set_by ? setByText(c.set_by) : "–"),
      el("td", { class: "actions" }, c.source === "config" ? "" :
        el("button", { type: "button", "data-action": "lift", "data-tag": c.tag, "data-kind": c.kind, "data-path": c.lift,
          "data-local": c.source === "local" ? "1" : "", title: "Lift the " + c.kind + " of " + c.tag }, "Lift"))));
    fill($("here").tBodies[0], rows);
    $("here").hidden = rows.length === 0;
    $("here-note").textContent = rows.length === 0 ? "none: no control of any kind is in force on this instance" : "";
  }

  function renderHolders(s) {
    const rows = s.holders.map((h) => el("tr", { "data-tag": h.tag, class: h.held_for_seconds >= 1 ? "long" : "" },
      td(h.client_id === 0 ? "–" : h.client_id, "num"), td(h.user || "–"), td(h.tag, "tag"),
      td(fmtSec(h.held_for_seconds), "num"), td(h.in_transaction ? "yes" : "no"), td(h.statement || "–", "stmt"),
      td(h.shape || "–", "shape")));
    fill($("holders").tBodies[0], rows);
    $("holders").hidden = rows.length === 0;
    $("holders-note").textContent = rows.length === 0 ? "no backend connection is held right now" :
      s.holders_total > rows.length ? (s.holders_total - rows.length) + " more not shown" : "";
  }

  function renderEngine(s) {
    const e = s.engine;
    if (!e) {
      $("engine-state").textContent = "off";
      $("engine-detail").textContent = "no reservation metrics (reservation.enabled: false?)";
      $("engine").hidden = true;
      return;
    }
    $("engine").hidden = false;
    const r = e.reconciler;
    const stateText = { ok: "reconciler ok", not_run: "reconciler: no cycle yet", failing: "reconciler failing",
      violation: "invariant violated", alerting: "ALERTING" }[r.state] || r.state;
    $("engine-state").textContent = stateText;
    $("card-engine").className = "card " + (r.state === "alerting" || r.state === "violation" ? "bad" : r.state === "failing" ? "warn" : "");
    $("engine-detail").textContent = fmtNum(e.inline_refills_per_second) + " inline refills/s (" + fmtPct(e.inline_refill_share) +
      " of reserves) · " + fmtNum(e.reserves_per_second) + " reserves/s";
    $("engine-summary").textContent = "Reconciler: " + r.cycles + " cycles, " + r.errors + " failed in the window, " +
      r.violating_pools + " pools violating, " + r.alerting_pools + " alerting. Inline-refill rate is the leading indicator of reserve p99.";
    fill($("hot-pools").tBodies[0], e.hot_pools.map((h) => el("tr", null,
      td(h.shop_id), td(h.inventory_item_id), td(h.inventory_group_id), td(h.depth, "num"))));
    $("hot-pools").hidden = e.hot_pools.length === 0;
  }

  // ---- refresh loop

  function showMessage(text, bad) {
    const m = $("message");
    m.textContent = text;
    m.className = bad ? "bad" : "ok";
    m.hidden = !text;
  }

  // askToken shows the token form, saying why; the page goes on showing
  // what it may read meanwhile.
  function askToken(why, localTokenPath) {
    $("token-why").textContent = why + (localTokenPath ?
      " On holdfast's machine, the local credential's token is in " + localTokenPath + "." : "");
    $("token-form").hidden = false;
    $("token-input").focus();
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      render(await api("GET", "/api/status"));
    } catch (err) {
      $("live").className = "dot bad";
      if (err.status === 401 && token) {
        // Refused (a reload changed the credentials?): go on without it.
        showMessage("The token was refused, and is forgotten: " + err.message, true);
        token = "";
        sessionStorage.removeItem(TOKEN_KEY);
        return refresh();
      }
      if (err.status === 401) {
        // This listener answers nothing without a credential.
        awaiting = true;
        $("main").hidden = true;
        askToken("This admin listener answers only requests with a credential (admin.credentials, scope read or write).", err.localTokenPath);
        return; // until a token is given
      }
      $("updated").textContent = "refresh failed: " + err.message;
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    token = $("token-input").value.trim();
    $("token-input").value = "";
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    showMessage("", false);
    const act = awaiting;
    awaiting = null;
    $("token-form").hidden = true;
    if (act && act !== true) await perform(act);
    refresh();
  });
  $("forget-token").addEventListener("click", () => {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });

  // ---- actions: every change is confirmed first

  function field(label, id, attrs) {
    return el("label", null, label + " ", el("input", Object.assign({ id: id }, attrs)));
  }

  const actions = {
    drain: (tag) => ({
      title: "Drain " + tag + "?",
      text: "New statements tagged " + tag + " will fail at once with error 9001, " + scope + ", until the tag is undrained. " +
        "Transactions already holding a connection may finish, unless a grace period is given: then they are disconnected after it.",
      fields: [field("Reason", "confirm-reason", { type: "text", placeholder: "e.g. INC-123", maxLength: 200 }),
        field("Grace", "confirm-grace", { type: "text", placeholder: "e.g. 30s (empty: never kill)", size: 10 }),
        field("For", "confirm-for", { type: "text", placeholder: "e.g. 30m (empty: until undrained)", size: 10 })],
      ok: "Drain " + tag,
      run: () => {
        const q = new URLSearchParams();
        const reason = $("confirm-reason").value.trim(), grace = $("confirm-grace").value.trim(), dur = $("confirm-for").value.trim();
        if (reason) q.set("reason", reason);
        if (grace) q.set("grace", grace);
        if (dur) q.set("for", dur);
        return api("POST", "/api/tags/" + encodeURIComponent(tag) + "/drain" + (q.toString() ? "?" + q : ""));
      },
      done: "drained " + tag,
    }),
    undrain: (tag) => ({
      title: "Undrain " + tag + "?",
      text: "New statements tagged " + tag + " will borrow connections again.",
      ok: "Undrain " + tag,
      run: () => api("DELETE", "/api/tags/" + encodeURIComponent(tag) + "/drain"),
      done: "undrained " + tag,
    }),
    limit: (tag) => ({
      title: "Limit " + tag + "?",
      text: "At most N backend connections for " + tag + ", " + scope + " together; its other borrowers queue (error 9002 after pool.acquire_timeout).",
      fields: [field("N", "confirm-max", { type: "number", min: 1, value: 1, required: true, size: 4 }),
        field("Reason", "confirm-reason", { type: "text", placeholder: "e.g. INC-123", maxLength: 200 }),
        field("For", "confirm-for", { type: "text", placeholder: "e.g. 30m (empty: until lifted)", size: 10 })],
      ok: "Limit " + tag,
      run: () => {
        const q = new URLSearchParams({ max: $("confirm-max").value });
        const reason = $("confirm-reason").value.trim(), dur = $("confirm-for").value.trim();
        if (reason) q.set("reason", reason);
        if (dur) q.set("for", dur);
        return api("PUT", "/api/tags/" + encodeURIComponent(tag) + "/limit?" + q);
      },
      done: "limited " + tag,
    }),
    unlimit: (tag) => ({
      title: "Lift the limit on " + tag + "?",
      text: tag + " may hold any number of backend connections again.",
      ok: "Lift limit",
      run: () => api("DELETE", "/api/tags/" + encodeURIComponent(tag) + "/limit"),
      done: "lifted the limit on " + tag,
    }),
    readonly: (tag) => ({
      title: "Make " + tag + " read-only?",
      text: "Statements tagged " + tag + " that may write (INSERT, UPDATE, DELETE, DDL, CALL, locking reads) will fail with error 9011, " +
        scope + ", until it is lifted (under Controls in force here). Reads, SHOW, SET, USE, BEGIN, COMMIT and ROLLBACK still run.",
      fields: [field("Reason", "confirm-reason", { type: "text", placeholder: "e.g. INC-123", maxLength: 200 }),
        field("For", "confirm-for", { type: "text", placeholder: "e.g. 30m (empty: until lifted)", size: 10 })],
      ok: "Make " + tag + " read-only",
      run: () => {
        const q = new URLSearchParams();
        const reason = $("confirm-reason").value.trim(), dur = $("confirm-for").value.trim();
        if (reason) q.set("reason", reason);
        if (dur) q.set("for", dur);
        return api("PUT", "/api/tags/" + encodeURIComponent(tag) + "/readonly" + (q.toString() ? "?" + q : ""));
      },
      done: tag + " is read-only",
    }),
    lift: (tag, b) => ({
      title: "Lift the " + b.dataset.kind + " of " + tag + "?",
      text: b.dataset.local ? "This instance's own " + b.dataset.kind + " of " + tag + " is lifted (a configured one until the next reload)." :
        "The fleet's " + b.dataset.kind + " of " + tag + " is lifted on every instance.",
      ok: "Lift",
      run: () => api("DELETE", b.dataset.path + (b.dataset.local ? "?local=1" : "")),
      done: "lifted the " + b.dataset.kind + " of " + tag,
    }),
  };

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-action]");
    if (!b || !actions[b.dataset.action]) return;
    pending = actions[b.dataset.action](b.dataset.tag, b);
    $("confirm-title").textContent = pending.title;
    $("confirm-text").textContent = pending.text;
    $("confirm-fields").replaceChildren(...(pending.fields || []));
    $("confirm-ok").textContent = pending.ok;
    $("confirm").showModal();
  });
  $("confirm-cancel").addEventListener("click", () => { pending = null; $("confirm").close(); });
  // perform runs a confirmed action. A change refused for want of a write
  // credential asks for one, and runs once it is given.
  async function perform(act) {
    try {
      await act.run();
      showMessage(act.done, false);
    } catch (err) {
      if (err.status === 401 || (err.status === 403 && / has scope read/.test(err.message))) {
        if (err.status === 401 && token) {
          token = "";
          sessionStorage.removeItem(TOKEN_KEY);
        }
        awaiting = act;
        showMessage("Not done: " + err.message, true);
        askToken("This change needs a credential of scope write: give its token, and it is made.", err.localTokenPath);
        return;
      }
      showMessage("Refused: " + err.message, true);
    }
  }

  $("confirm-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const act = pending;
    pending = null;
    $("confirm").close();
    if (!act) return;
    await perform(act);
    refresh();
  });

  refresh();
})();
