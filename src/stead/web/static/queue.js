// The needs-a-human page: an inbox kept up to date row by row, and worked
// with the keyboard.
//
// Every poll fetches the queue's fragment; a row (keyed by its id, versioned
// by data-version: what it shows that matters to a decision) is replaced
// only when its version changed and nobody is editing it: focus in it, a
// value typed or chosen, a box ticked, its details opened. A row being edited
// that changed is marked with what changed (its status, the values it is
// bound to, what it asks), one resolved elsewhere is marked gone; its form
// still sends what the operator decided on (the server refuses it if the run
// moved on). What only ticks (the time left) is refreshed in place, with no
// notice. New rows are added in the queue's order.
//
// Keys (outside a field): j/k or the arrows move between rows, o or Enter
// opens a row's details, a goes to the row's action (its reason; Enter
// sends), r to its reject form; Esc leaves a field for its row. In a reason
// text area Ctrl+Enter sends the form.
(function () {
  "use strict";
  const queue = document.getElementById("attention");
  if (!queue) { return; }
  const url = queue.dataset.pollUrl;
  const every = Number(queue.dataset.pollMs) || 2000;

  function changed(el) {
    if (el.type === "hidden") { return false; }
    if (el.type === "checkbox" || el.type === "radio") { return el.checked !== el.defaultChecked; }
    if (el.tagName === "SELECT") {
      return [...el.options].some((o) => o.selected !== o.defaultSelected);
    }
    return el.value !== el.defaultValue;
  }

  function editing(row) {
    if (row.contains(document.activeElement) && document.activeElement !== row) { return true; }
    if ([...row.querySelectorAll("input, select, textarea")].some(changed)) { return true; }
    return [...row.querySelectorAll("details")].some((d) => d.open);
  }

  // What a person would see differ between the row as drawn and as it is now.
  function differences(old, row) {
    const said = [];
    const was = old.dataset;
    const now = row.dataset;
    if (was.status !== now.status) { said.push(`the run was ${was.status}, it is ${now.status} now`); }
    if (was.bound !== now.bound) { said.push(`it is bound to ${now.bound || "nothing"} now (was ${was.bound || "nothing"})`); }
    if (was.asks !== now.asks) { said.push(`it asks “${now.asks}” now`); }
    if (said.length === 0) { said.push("its actions changed"); }
    return said;
  }

  function notice(row, text) {
    const p = row.querySelector(".notice");
    if (!p) { return; }
    p.textContent = text;
    p.hidden = false;
  }

  function ticks(old, row) {
    const fresh = [...row.querySelectorAll("[data-tick]")];
    [...old.querySelectorAll("[data-tick]")].forEach((el, i) => {
      if (fresh[i]) { el.textContent = fresh[i].textContent; }
    });
    const age = row.querySelector(".age");
    const mine = old.querySelector(".age");
    if (age && mine) { mine.textContent = age.textContent; }
  }

  function merge(doc) {
    const counts = doc.getElementById("counts");
    const mine = document.getElementById("counts");
    if (counts && mine) { mine.replaceWith(counts); }
    const rows = document.getElementById("rows");
    const fresh = doc.getElementById("rows");
    if (!rows || !fresh) { return; }
    const wanted = new Map([...fresh.children].filter((e) => e.id).map((e) => [e.id, e]));
    for (const row of [...rows.children]) {
      if (!row.id) { row.remove(); } else if (!wanted.has(row.id)) {
        if (editing(row)) {
          row.classList.add("gone");
          notice(row, "This was resolved elsewhere: it is no longer on the queue. Sending this form is checked against the run as it is now.");
        } else { row.remove(); }
      }
    }
    let previous = null;
    for (const [id, row] of wanted) {
      const old = document.getElementById(id);
      if (old === null) {
        if (previous === null) { rows.prepend(row); } else { previous.after(row); }
        previous = row;
      } else if (old.dataset.version === row.dataset.version) {
        ticks(old, row);
        previous = old;
      } else if (editing(old)) {
        old.classList.remove("gone");
        old.classList.add("changed");
        notice(old, `Changed since you began: ${differences(old, row).join("; ")}. Send it and the run is checked again, or reload to see it as it is now.`);
        previous = old;
      } else {
        const focused = document.activeElement === old;
        old.replaceWith(row);
        if (focused) { row.focus(); }
        previous = row;
      }
    }
    if (rows.children.length === 0) {
      for (const note of [...fresh.children].filter((e) => !e.id)) { rows.append(note); }
    }
  }

  async function poll() {
    try {
      const answer = await fetch(url, { credentials: "same-origin" });
      if (answer.ok) {
        merge(new DOMParser().parseFromString(await answer.text(), "text/html"));
      }
    } catch (e) {
      // The server is away for now: the next poll asks again.
    }
    queue.dataset.polls = String(Number(queue.dataset.polls) + 1);
    setTimeout(poll, every);
  }

  // -- the keyboard ------------------------------------------------------------
  function items() { return [...document.querySelectorAll("#rows > li.item")]; }

  function current() {
    const el = document.activeElement;
    return el ? el.closest("#rows > li.item") : null;
  }

  function move(by) {
    const all = items();
    if (all.length === 0) { return; }
    const at = all.indexOf(current());
    const next = at < 0 ? (by > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + by));
    all[next].focus();
    all[next].scrollIntoView({ block: "nearest" });
  }

  function reason(row, action) {
    const form = action ? row.querySelector(`form.action[data-action=${action}]`)
      : row.querySelector("form.action.compact");
    if (!form) { return false; }
    const details = form.closest("details");
    if (details) { details.open = true; }
    const why = form.querySelector("[name=why]");
    if (why) { why.focus(); }
    return true;
  }

  document.addEventListener("keydown", (e) => {
    const field = e.target.closest && e.target.closest("input, textarea, select");
    if (field) {
      if (e.key === "Escape") {
        const row = field.closest("#rows > li.item");
        if (row) { e.preventDefault(); row.focus(); }
      } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && field.tagName === "TEXTAREA") {
        e.preventDefault();
        field.form.requestSubmit();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    const row = current();
    if (e.key === "j" || e.key === "ArrowDown") { e.preventDefault(); move(1); }
    else if (e.key === "k" || e.key === "ArrowUp") { e.preventDefault(); move(-1); }
    else if (row && e.target === row && (e.key === "o" || e.key === "Enter")) {
      e.preventDefault();
      const d = row.querySelector("details.detail");
      if (d) { d.open = !d.open; }
    } else if (row && e.key === "a") {
      if (reason(row, null)) { e.preventDefault(); }
    } else if (row && e.key === "r") {
      if (reason(row, "reject")) { e.preventDefault(); }
    }
  });

  const all = document.getElementById("pick-all");
  if (all) {
    all.hidden = false;
    all.addEventListener("click", () => {
      for (const box of document.querySelectorAll("#rows input[name=pick]")) { box.checked = true; }
    });
  }
  setTimeout(poll, every);
}());
