// ahe view: keeps the page current without a reload. The server sends a `change` event
// (server-sent events) when the directory's change token moves; the page is then fetched
// again and its body swapped in place (scroll position kept).
(function () {
  "use strict";
  var meta = function () { return document.querySelector('meta[name="ahe-view-token"]'); };
  var token = meta() ? meta().content : "";
  var busy = false, again = false, updates = 0;
  function status(s) {
    var e = document.getElementById("ahe-view-live");
    if (e) e.textContent = s;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, { cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var m = doc.querySelector('meta[name="ahe-view-token"]');
        if (m && meta()) { token = m.content; meta().content = token; }
        var y = window.scrollY;
        document.body.replaceWith(document.adoptNode(doc.body));
        window.scrollTo(0, y);
        updates += 1;
        document.documentElement.setAttribute("data-ahe-view-updates", String(updates));
        status("live · updated " + new Date().toLocaleTimeString());
      })
      .catch(function (e) { status("live · update failed (" + e + ")"); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  if (!window.EventSource) { status("not live (no EventSource)"); return; }
  var es = new EventSource("/_view/events?path=" + encodeURIComponent(location.pathname) +
    "&token=" + encodeURIComponent(token));
  es.addEventListener("change", function (e) { if (e.data !== token) refresh(); });
  es.onopen = function () { status("live"); };
  es.onerror = function () { status("reconnecting…"); };
})();
