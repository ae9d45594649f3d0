// Live review: the review page polls a small endpoint (an ETag, 304 while nothing
// changed) and, when someone else decided, edited or commented on an entry shown here,
// fetches that card again and puts it in place. What this person typed in any card (an
// edit, a comment) stays, with its fold open and the focus where it was. It also
// reports the card this person is at and shows who else is on the page and where.
(function () {
  "use strict";

  var root = document.getElementById("live-review");
  if (!root || !window.fetch) return;

  var interval = parseInt(root.dataset.interval, 10) || 1000;
  var cursor = null; // the last change this page has
  var etag = "";
  var token = ""; // the last answer's poll token: the server's quick 304 needs it
  var people = [];
  var status = root.dataset.status;
  var reservedBy = null; // who holds the proposal, as the first poll found it
  var lastCard = "";
  var failures = 0;
  var started = 0; // when the last poll was sent
  var GAP_MS = 250;
  // Changes this page made itself, per card, not yet seen in a poll: its own action
  // already answered with the card, so the poll does not fetch it again. Forgotten
  // after OWN_MS (an answer that came after the poll that saw its change).
  var own = {};
  var OWN_MS = 5000;
  var OWN_ACTIONS = /\/(decide|undo|comment|pin|duplicate)\/$/;

  function cardOf(element) {
    return element && element.closest ? element.closest("[data-entry]") : null;
  }

  document.addEventListener("focusin", function (event) {
    var card = cardOf(event.target);
    if (card) lastCard = card.id;
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var card = cardOf(event.detail.elt);
    var path = (event.detail.requestConfig && event.detail.requestConfig.path) || "";
    if (card && event.detail.successful && OWN_ACTIONS.test(path.split("?")[0])) {
      var mine = own[card.id];
      own[card.id] = { n: (mine ? mine.n : 0) + 1, at: Date.now() };
    }
  });

  function here() {
    var card = cardOf(document.activeElement);
    if (card) return card.id;
    return lastCard && document.getElementById(lastCard) ? lastCard : "";
  }

  // A field's name within its card: the fold it is in and its name.
  function fieldKey(field) {
    var fold = field.closest("details");
    return (fold ? fold.className : "") + "|" + field.name;
  }

  function typed(card) {
    var out = [];
    card.querySelectorAll("textarea, input[type=text], input[type=number]").forEach(function (field) {
      if (field.value !== field.defaultValue || field === document.activeElement) {
        out.push({ key: fieldKey(field), field: field });
      }
    });
    return out;
  }

  // The person's own action on a card: on its way, or its answer still being swapped in
  // and settled (review.js moves the focus when it has settled).
  function busy(card) {
    return card.querySelector(".htmx-request") !== null ||
      card.classList.contains("htmx-request") ||
      card.classList.contains("htmx-swapping") ||
      card.classList.contains("htmx-settling");
  }

  // Put ``fresh`` in the place of ``old``, carrying over what was typed in ``old``.
  // False (and nothing changed) when a typed field has no place in ``fresh``.
  function replaceCard(old, fresh) {
    var kept = typed(old);
    var comment = fresh.querySelector("details.comment-form");
    if (comment && old.querySelector("details.comment-form form") && window.memoryuiCommentForm) {
      window.memoryuiCommentForm(comment); // a comment being written keeps its form
    }
    var targets = [];
    for (var i = 0; i < kept.length; i++) {
      var match = null;
      fresh.querySelectorAll("textarea, input[type=text], input[type=number]").forEach(function (field) {
        if (!match && fieldKey(field) === kept[i].key) match = field;
      });
      if (!match) return false;
      targets.push(match);
    }
    var active = document.activeElement;
    var focusAt = null;
    kept.forEach(function (entry, j) {
      targets[j].value = entry.field.value;
      var fold = targets[j].closest("details");
      if (fold) fold.open = true;
      if (entry.field === active) {
        focusAt = { field: targets[j], start: active.selectionStart, end: active.selectionEnd };
      }
    });
    // Folds read, kept open. One that loads its body when opened (rendered text,
    // evidence) is opened once the card is in the page, so it loads that body again,
    // for the card as it is now.
    var reopen = [];
    old.querySelectorAll("details[open]").forEach(function (fold) {
      var twin = fold.className && fresh.querySelector("details." + fold.className.trim().split(/\s+/).join("."));
      if (!twin) return;
      if (twin.hasAttribute("data-fold")) reopen.push(twin);
      else twin.open = true;
    });
    var wasFocused = active === old;
    old.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
    reopen.forEach(function (fold) { fold.open = true; });
    if (focusAt) {
      focusAt.field.focus({ preventScroll: true });
      if (focusAt.start !== null) focusAt.field.setSelectionRange(focusAt.start, focusAt.end);
    } else if (wasFocused) {
      fresh.focus({ preventScroll: true });
    }
    return true;
  }

  function fetchCard(change) {
    // The card and the progress bar as this fetch begins: an answer of the person's
    // own action swapped in meanwhile may be newer than what this fetch brings (the
    // bar counts every entry), so it is fetched again.
    var drawn = document.getElementById(change.card);
    var bar = document.getElementById("review-progress");
    var params = new URLSearchParams(window.location.search);
    params.set("document", change.document);
    params.set("key", change.key);
    return fetch(root.dataset.cardUrl + "?" + params.toString(), {
      credentials: "same-origin",
      headers: { "HX-Request": "true" },
      cache: "no-store",
    }).then(function (response) {
      if (!response.ok) return;
      return response.text().then(function (html) {
        var old = document.getElementById(change.card);
        if (!old) return;
        if (busy(old)) { // the person's own action on it: after its answer, again
          window.setTimeout(function () { fetchCard(change); }, 500);
          return;
        }
        if (old !== drawn || document.getElementById("review-progress") !== bar) {
          return fetchCard(change); // answered meanwhile: maybe newer
        }
        var template = document.createElement("template");
        template.innerHTML = html;
        var fresh = template.content.querySelector("[data-entry]");
        if (!fresh) return;
        if (!replaceCard(old, fresh)) {
          old.classList.add("live-stale");
          return;
        }
        template.content.querySelectorAll("[hx-swap-oob]").forEach(function (part) {
          var current = document.getElementById(part.id);
          part.removeAttribute("hx-swap-oob");
          if (current) current.replaceWith(part);
        });
        showPeople();
      });
    });
  }

  function showPeople() {
    document.querySelectorAll("[data-presence]").forEach(function (badge) { badge.remove(); });
    var list = document.getElementById("live-people");
    list.textContent = "";
    if (!people.length) return;
    list.appendChild(document.createTextNode("Also here: "));
    people.forEach(function (person, i) {
      var card = person.card ? document.getElementById(person.card) : null;
      var who = document.createElement("span");
      who.className = "badge presence";
      var title = card ? card.querySelector(".entry-title") : null;
      who.textContent = person.name + (title ? " at " + title.textContent : person.card ? " (another page)" : "");
      list.appendChild(who);
      if (i < people.length - 1) list.appendChild(document.createTextNode(" "));
      if (card) {
        var badge = document.createElement("span");
        badge.className = "badge presence";
        badge.dataset.presence = person.name;
        badge.textContent = person.name + " is here";
        card.querySelector("header").appendChild(badge);
      }
    });
  }

  function notice(text) {
    document.getElementById("live-notice").textContent = text;
  }

  function apply(state) {
    cursor = state.cursor;
    people = state.people;
    var holder = state.reserved_by === root.dataset.me ? "" : state.reserved_by;
    if (state.status !== status) {
      status = state.status;
      notice("This proposal is now " + state.status_label.toLowerCase() + ": reload the page.");
    } else if (reservedBy !== null && holder !== reservedBy) {
      notice(holder ? holder + " is reviewing this proposal now (reserved): reload the page."
        : "Nobody else holds this proposal now: reload the page to decide.");
    } else if (state.reload) {
      notice("Many entries changed meanwhile: reload the page to see them all.");
    }
    reservedBy = holder;
    var now = Date.now();
    var shown = state.changes.filter(function (change) {
      var mine = own[change.card] && now - own[change.card].at < OWN_MS ? own[change.card].n : 0;
      delete own[change.card];
      return change.n > mine && document.getElementById(change.card) !== null;
    });
    showPeople();
    return Promise.all(shown.map(fetchCard));
  }

  function poll() {
    started = Date.now();
    var params = new URLSearchParams({ at: here() });
    if (cursor === null) params.set("drawn", root.dataset.drawn);
    else params.set("since", cursor);
    var headers = {};
    if (etag) headers["If-None-Match"] = etag;
    if (token) headers["X-Live-Token"] = token;
    fetch(root.dataset.liveUrl + "?" + params.toString(), {
      credentials: "same-origin",
      headers: headers,
      cache: "no-store",
    }).then(function (response) {
      if (response.status === 304 || response.ok) {
        etag = response.headers.get("ETag") || etag;
        token = response.headers.get("X-Live-Token") || token;
      }
      if (response.status === 304) return null;
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json().then(apply);
    }).then(function () {
      failures = 0;
      next();
    }, function () {
      failures += 1; // a server restarting, a network gone: ask less often
      next();
    });
  }

  // Polls start once an interval, counted from the last poll's start (so a slow answer
  // does not add to the time the others' changes take to show), and never sooner than
  // GAP_MS after the last answer, so that a slow server is not asked back to back.
  function next() {
    var wait = failures ? interval * Math.min(30, Math.pow(2, failures))
      : Math.max(GAP_MS, interval - (Date.now() - started));
    if (document.hidden) wait = Math.max(wait, 5000); // still within the presence's expiry
    window.setTimeout(poll, wait);
  }

  // Leaving (closed, reloaded, navigated away): the others drop this person at once.
  window.addEventListener("pagehide", function () {
    if (!navigator.sendBeacon) return;
    var form = new FormData();
    form.append("csrfmiddlewaretoken", root.dataset.csrf);
    navigator.sendBeacon(root.dataset.leaveUrl, form);
  });

  poll();
})();
