// kshare console: refresh <main> in place and ask before destructive actions. No inline script
// anywhere (the Content-Security-Policy forbids it); the HTML swapped in is the server's own,
// escaped page fragment.
"use strict";
(function () {
  var main = document.getElementById("main");
  var period = main ? parseInt(main.getAttribute("data-refresh") || "0", 10) : 0;
  var paused = false;
  var held = false;  // the pause button: no refresh until pressed again
  var button = document.getElementById("pause");

  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }

  function openDetails() {
    var open = [];
    main.querySelectorAll("details[open]").forEach(function (d, i) { open.push(i); });
    return open;
  }

  function refresh() {
    if (paused || held || busy() || document.hidden) { return; }
    var open = openDetails();
    fetch(window.location.href, { headers: { "X-Kshare-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || busy()) { return; }
        main.innerHTML = html;
        var all = main.querySelectorAll("details");
        open.forEach(function (i) { if (all[i]) { all[i].open = true; } });
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* the next period tries again */ });
  }

  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { ev.preventDefault(); }
  });
  document.addEventListener("toggle", function (ev) {
    if (ev.target.tagName === "DETAILS") { paused = main.querySelector("details[open]") !== null; }
  }, true);
  if (button) {
    button.hidden = !(main && period > 0);
    button.addEventListener("click", function () {
      held = !held;
      button.textContent = held ? "resume refresh" : "pause refresh";
      button.setAttribute("aria-pressed", held ? "true" : "false");
    });
  }
  if (main && period > 0) { window.setInterval(refresh, period); }
})();
