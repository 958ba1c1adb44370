// The needs-a-human page, kept up to date row by row. Every poll fetches the
// queue's fragment; a row (keyed by its id, versioned by data-version) is
// replaced only when its version changed and nobody is editing it: focus in
// it, a value typed or chosen, a box ticked, a detail opened. A row being
// edited that changed or was resolved elsewhere is marked instead, and its
// form still sends what the operator decided on (the server refuses it if
// the run moved on). New rows are added in the queue's order.
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
    if (row.contains(document.activeElement)) { return true; }
    if ([...row.querySelectorAll("input, select, textarea")].some(changed)) { return true; }
    return [...row.querySelectorAll("details")].some((d) => d.open);
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
        if (editing(row)) { row.classList.add("gone"); } else { row.remove(); }
      }
    }
    let previous = null;
    for (const [id, row] of wanted) {
      const old = document.getElementById(id);
      if (old === null) {
        if (previous === null) { rows.prepend(row); } else { previous.after(row); }
        previous = row;
      } else if (old.dataset.version === row.dataset.version) {
        old.classList.remove("changed", "gone");
        previous = old;
      } else if (editing(old)) {
        old.classList.remove("gone");
        old.classList.add("changed");
        previous = old;
      } else {
        old.replaceWith(row);
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

  const all = document.getElementById("pick-all");
  if (all) {
    all.hidden = false;
    all.addEventListener("click", () => {
      for (const box of document.querySelectorAll("#rows input[name=pick]")) { box.checked = true; }
    });
  }
  setTimeout(poll, every);
}());
