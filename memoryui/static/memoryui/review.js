// The proposal review page's keyboard and in-place flow. Every action is a form that
// works without this script (a POST and a redirect back); htmx swaps the entry's card
// in place, and this moves the focus, opens the dialogs and maps the shortcuts.
(function () {
  "use strict";

  var NEXT_KEY = "memoryui-review-next";
  // What a card's action was ({id, decision}), kept on its own request: an answer that
  // settles late (an undo's, while the reviewer already pressed "a") must not take the
  // place of the next action's.
  var PENDING = "memoryuiPending";

  function cards() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-entry]"));
  }

  function undecided(card) {
    return card.dataset.decided === "" && !card.hasAttribute("data-undecidable") &&
      card.querySelector("button[aria-keyshortcuts=a]") !== null;
  }

  function cardOf(element) {
    return element && element.closest ? element.closest("[data-entry]") : null;
  }

  var lastCard = null;

  function currentCard() {
    var card = cardOf(document.activeElement);
    if (card) return card;
    if (lastCard && document.body.contains(lastCard)) return lastCard;
    if (lastCard && lastCard.id) return document.getElementById(lastCard.id);
    return null;
  }

  function visible(card) {
    var r = card.getBoundingClientRect();
    return r.top >= 0 && r.top < window.innerHeight - 48;
  }

  function focusCard(card, toTop) {
    if (!card) return;
    lastCard = card;
    card.focus({ preventScroll: true });
    // Moving on (j, k, n) brings the entry to the top; after a decision the page stays
    // put unless the next entry is out of sight.
    if (toTop || !visible(card)) card.scrollIntoView({ block: "start" });
  }

  function step(delta) {
    var all = cards();
    var at = all.indexOf(currentCard());
    var next = at === -1 ? (delta > 0 ? 0 : all.length - 1) : at + delta;
    if (next >= 0 && next < all.length) focusCard(all[next], true);
  }

  function nextUndecided(from, navigate) {
    var toTop = navigate;
    var all = cards();
    var at = all.indexOf(from);
    for (var i = at + 1; i < all.length; i++) {
      if (undecided(all[i])) return focusCard(all[i], toTop);
    }
    for (var j = 0; j <= at && j < all.length; j++) {
      if (undecided(all[j])) return focusCard(all[j], toTop);
    }
    if (navigate) {
      var section = from ? from.closest("section.review") : null;
      var link = (section && section.querySelector("a[data-next-page]")) ||
        document.querySelector("a[data-next-page]");
      if (link) {
        // Listing undecided entries only, this page lists the next ones once reloaded.
        var here = new URL(window.location.href);
        var href = here.searchParams.get("show") === "undecided" ? here.href : link.href;
        sessionStorage.setItem(NEXT_KEY, "1");
        window.location.href = href.split("#")[0]; // a fragment would take the focus
      }
    }
  }

  function press(card, shortcut) {
    if (!card) return;
    var control = card.querySelector("button[aria-keyshortcuts=" + shortcut + "]");
    if (control) control.click();
  }

  var loading = null; // a fold opened by its shortcut whose form is still loading
  var typedAhead = ""; // what was typed meanwhile: text for the form, not shortcuts

  function focusText(area) {
    area.focus();
    if (typedAhead) area.value += typedAhead;
    typedAhead = "";
    area.setSelectionRange(area.value.length, area.value.length);
  }

  // A card's comment form, built from the page's one copy (its entry's fields and
  // token are the card's own) when its fold opens; without this script the fold links to a page
  // with the form.
  function commentForm(details) {
    var template = document.getElementById("comment-form");
    var card = cardOf(details);
    var bar = card && card.querySelector("form.card-bar");
    if (!template || !bar || details.querySelector("form")) return;
    var form = template.content.querySelector("form").cloneNode(true);
    bar.querySelectorAll("input[type=hidden]").forEach(function (input) {
      form.prepend(input.cloneNode());
    });
    form.querySelector("input[name=line]").max = details.dataset.lines;
    form.querySelector("[data-lines]").textContent = details.dataset.lines;
    details.querySelector(".comment-body").replaceChildren(form);
    if (window.htmx && document.body.contains(form)) window.htmx.process(form);
  }
  window.memoryuiCommentForm = commentForm;

  function openDetails(card, selector) {
    if (!card) return;
    var details = card.querySelector(selector);
    if (!details) return;
    if (details.matches("details.comment-form")) commentForm(details);
    details.open = true;
    var area = details.querySelector("textarea");
    if (area) focusText(area);
    // The edit form, still on its way: focused once loaded, and what is typed meanwhile
    // is its text. A fold with no form to type in (the evidence) leaves keys to be
    // shortcuts: "i" then "r" rejects the entry, however soon the evidence arrives.
    else if (details.hasAttribute("data-fold") && details.querySelector("summary + * a[href]") &&
             details.matches("details.edit-then-accept")) loading = details;
  }

  function dialogOpen() {
    return document.querySelector("dialog[open]") !== null;
  }

  function typing(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "textarea" || tag === "select" || target.isContentEditable ||
      (tag === "input" && !/^(checkbox|radio|submit|button|reset)$/.test(target.type));
  }

  function onKey(event) {
    if (event.defaultPrevented) return;
    var target = event.target;
    if (typing(target)) {
      var form = target.form || (target.closest && target.closest("form"));
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && form) {
        event.preventDefault();
        form.requestSubmit();
      } else if (event.key === "Escape" && target.closest && target.closest("[data-entry] details")) {
        event.preventDefault();
        var details = target.closest("details");
        details.open = false;
        focusCard(cardOf(details));
      }
      return; // shortcuts wait while someone types
    }
    if (loading) { // its form is on its way: keys are text for it, never decisions
      if (event.key === "Escape") {
        loading.open = false;
        loading = null;
        typedAhead = "";
      } else if (event.key.length === 1 && !event.ctrlKey && !event.metaKey) {
        typedAhead += event.key;
      }
      event.preventDefault();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || dialogOpen()) return;
    if (busy.length && SHORTCUTS.indexOf(event.key) !== -1) {
      // A card's action is on its way (htmx would drop a second request from its form,
      // and the focus moves when it is done): the key waits its turn.
      typedKeys.push(event.key);
      event.preventDefault();
      return;
    }
    if (run(event.key)) event.preventDefault();
  }

  var SHORTCUTS = ["j", "k", "n", "a", "r", "u", "p", "v", "e", "c", "i", "s"];
  var BUSY = "memoryuiBusy";
  var FINISHED = "memoryuiFinished";
  var busy = []; // the requests of card actions on their way
  var typedKeys = []; // shortcuts typed meanwhile, run in order once they are done

  // One request is done (its card swapped and settled, or it failed): the keys typed
  // meanwhile run now, each waiting for the action it starts.
  function release(xhr, keepKeys) {
    var at = busy.indexOf(xhr);
    if (at === -1) return;
    busy.splice(at, 1);
    if (!keepKeys) typedKeys = []; // after a failure, nothing typed blind goes on
    while (!busy.length && typedKeys.length) {
      if (dialogOpen() || loading) { // a dialog or a form took over: the rest is stale
        typedKeys = [];
        break;
      }
      run(typedKeys.shift());
    }
  }

  function run(key) {
    var card = currentCard();
    var handled = true;
    switch (key) {
      case "j": step(1); break;
      case "k": step(-1); break;
      case "n": nextUndecided(card, true); break;
      case "a": press(card, "a"); break;
      case "r": press(card, "r"); break;
      case "u": press(card, "u"); break;
      case "p": press(card, "p"); break;
      case "v": press(card, "v"); break;
      case "e": openDetails(card, "details.edit-then-accept"); break;
      case "c": openDetails(card, "details.comment-form"); break;
      case "i": openDetails(card, "details.evidence"); break;
      case "s": {
        var submit = document.getElementById("submit-review");
        if (submit) submit.click();
        break;
      }
      case "?": openHelp(); break;
      default: handled = false;
    }
    return handled;
  }

  function openHelp() {
    var help = document.getElementById("review-help");
    if (help && !help.open) help.showModal();
  }

  document.addEventListener("keydown", onKey);

  // A fold (evidence, rendered text, edit form) loads its body once, when first opened,
  // from the link it holds: without this script the link opens the same as a page.
  document.addEventListener("toggle", function (event) {
    var fold = event.target;
    if (!fold.open || !fold.matches) return;
    if (fold.matches("details.comment-form")) commentForm(fold);
    if (!fold.hasAttribute("data-fold")) return;
    fold.removeAttribute("data-fold");
    var link = fold.querySelector("summary + * a[href]");
    if (link && window.htmx) {
      window.htmx.ajax("GET", link.href, { source: link, target: link.parentElement, swap: "innerHTML" });
    }
  }, true);

  document.addEventListener("htmx:beforeRequest", function (event) {
    var card = cardOf(event.detail.elt);
    // Only an action that swaps the card itself (not a fold loading inside it).
    if (card && event.detail.target === card) {
      // A decision: the card's Accept or Reject (the button's value is in the form's
      // data), or the edit form's.
      var data = event.detail.requestConfig && event.detail.requestConfig.formData;
      var xhr = event.detail.xhr;
      if (xhr) {
        xhr[PENDING] = {
          id: card.id,
          decision: event.detail.elt.hasAttribute("data-decision-form") ||
            Boolean(data && data.has("decision")),
        };
        xhr[BUSY] = true;
        busy.push(xhr);
      }
    }
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail.xhr;
    if (!xhr || !xhr[BUSY]) return;
    if (!event.detail.successful) return release(xhr, false);
    // Done once its answer has settled (below). An answer that swaps nothing never
    // settles, and one swapped into a card that was replaced meanwhile settles where
    // this page does not hear it: either is done shortly after anyway (htmx's settle
    // timer, set before this one and shorter, always runs first).
    var target = event.detail.target;
    window.setTimeout(function () { finish(xhr, target); }, 200);
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail.target;
    if (target && target.id === "review-dialog-body") {
      var dialog = document.getElementById("review-dialog");
      if (!dialog.open) dialog.showModal();
      var first = dialog.querySelector("input[type=radio]:checked, button.primary, button.danger");
      if (first) first.focus();
      return;
    }
    if (target && target.id === "review-notice") { // refused: say why, over no dialog
      var open = document.querySelector("dialog[open]");
      if (open) open.close();
      target.scrollIntoView({ block: "center" });
      finish(event.detail.xhr, target);
      return;
    }
    if (loading && target && loading.contains(target)) { // the edit form is here
      var area = loading.querySelector("textarea");
      loading = null;
      if (area) focusText(area);
      return;
    }
    // A fold that loaded inside a card (evidence, rendered text) leaves the focus alone
    // and does not take the place of the card's own pending action.
    if (target && cardOf(target) && !target.matches("[data-entry]")) return;
    finish(event.detail.xhr, target);
  });

  // A card's action is done: the focus moves on, then the keys typed while it was on
  // its way run. Once per action, whichever of its settle and the fallback comes first.
  function finish(xhr, target) {
    if (!xhr || xhr[FINISHED]) return;
    xhr[FINISHED] = true;
    // A refused action says why: the focus stays, and what was typed after it is not
    // run blind.
    var refused = Boolean(target && target.id === "review-notice");
    if (!refused) moveFocus(xhr);
    if (xhr[BUSY]) release(xhr, !refused);
  }

  function moveFocus(xhr) {
    var done = xhr[PENDING];
    if (!done) return;
    xhr[PENDING] = null;
    var card = document.getElementById(done.id);
    if (!card) return;
    var active = document.activeElement;
    if (active !== card && cardOf(active) === card && typing(active)) return; // typing there
    if (done.decision && card.dataset.decided) {
      lastCard = card;
      nextUndecided(card, false);
      if (cardOf(document.activeElement) === null) focusCard(card);
    } else if (cardOf(document.activeElement) !== card) {
      focusCard(card); // unless the reviewer is already at it (say, typing in it)
    }
  }

  function failed(event) {
    loading = null; // a fold that could not load takes no more keys
    typedAhead = "";
    var xhr = event.detail && event.detail.xhr;
    if (xhr && xhr[BUSY]) release(xhr, false);
  }

  document.addEventListener("htmx:responseError", failed);
  document.addEventListener("htmx:sendError", failed);

  document.addEventListener("click", function (event) {
    var close = event.target.closest ? event.target.closest("[data-dialog-close]") : null;
    if (close && close.closest("dialog")) {
      event.preventDefault();
      close.closest("dialog").close();
      return;
    }
    if (event.target.id === "review-help-open") openHelp();
    var card = cardOf(event.target);
    if (card) lastCard = card;
    // A line number on the diff's right (the entry as approval would apply it): a
    // comment on that line.
    var number = event.target.closest ? event.target.closest("table.diff td.no") : null;
    if (card && number && number.cellIndex === 2 && number.textContent.trim()) {
      openDetails(card, "details.comment-form");
      var line = card.querySelector("details.comment-form input[name=line]");
      if (line) line.value = number.textContent.trim();
    }
  });

  document.addEventListener("close", function () {
    if (lastCard) focusCard(document.getElementById(lastCard.id));
  }, true);

  document.addEventListener("DOMContentLoaded", function () {
    if (sessionStorage.getItem(NEXT_KEY)) {
      sessionStorage.removeItem(NEXT_KEY);
      nextUndecided(null, false);
    } else if (window.location.hash) {
      var card = document.getElementById(window.location.hash.slice(1));
      if (card && card.hasAttribute("data-entry")) focusCard(card);
    }
  });
})();
