// turnkeep serve: live follow of a session's transcript.
//
// The server renders the transcript; this script appends the committed
// events that land afterwards, read from GET /sessions/{id}/stream (SSE),
// with the same markup (see turnkeep/serve/transcript.py). It starts after
// the last seq the page was rendered with; when the stream drops (a slow
// client, a restart), EventSource reconnects with Last-Event-ID, so no
// event is shown twice or skipped. Stored text is set as text, never HTML.
//
// For a signed-in reader the page also has a cancel button: after the user
// accepts a confirmation it posts {"confirm": true} to
// /sessions/{id}/cancel with the page's anti-forgery token (the
// turnkeep-csrf meta tag) in X-Turnkeep-CSRF; dismissed, it sends nothing.
"use strict";

(function () {
  const root = document.getElementById("transcript");
  const toggle = document.getElementById("follow");
  const state = document.getElementById("follow-state");
  if (!root || !toggle) {
    return;
  }
  const sessionId = root.dataset.session;
  // The id as a path segment: plain, or "~" and its base64url (serve/paths.py).
  const sessionPath = root.dataset.path;
  let lastSeq = Number(root.dataset.lastSeq);
  let source = null;
  let turn = null; // usage of the turn being followed
  // While a cancel is asked: whether it was recorded, and how a turn that
  // ended meanwhile ended (the stream can beat the reply).
  let cancel = null;
  const cancelButton = document.getElementById("cancel");
  const cancelResult = document.getElementById("cancel-result");
  const csrf = document.querySelector('meta[name="turnkeep-csrf"]');
  const encoder = new TextEncoder();

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  function container() {
    const sections = root.querySelectorAll("section.turn");
    const last = sections[sections.length - 1];
    if (last && !last.querySelector(".turn-end")) {
      return last;
    }
    return root;
  }

  function message(kind, who, text, seq) {
    const box = el("div", "msg " + kind);
    box.dataset.seq = String(seq);
    box.append(el("div", "who", who), el("pre", "", text));
    return box;
  }

  function sizeText(size) {
    if (size < 1000) {
      return size + " B";
    }
    if (size < 1000000) {
      return (size / 1000).toFixed(1) + " kB";
    }
    return (size / 1000000).toFixed(1) + " MB";
  }

  function render(event, size) {
    const data = event.data || {};
    if (turn) {
      turn.events += 1;
      turn.size += size;
    }
    if (event.type === "assistant/chunk") {
      let partial = root.querySelector(".msg.partial.live");
      if (!partial) {
        partial = el("div", "msg assistant partial live");
        const who = el("div", "who", "assistant ");
        who.append(el("span", "mark", "streaming"));
        partial.append(who, el("pre", "", ""));
        container().append(partial);
      }
      partial.querySelector("pre").textContent += data.text;
      return;
    }
    if (event.type === "assistant/message") {
      const partial = root.querySelector(".msg.partial.live");
      if (partial) {
        partial.remove();
      }
      container().append(message("assistant", "assistant", data.text, event.seq));
      return;
    }
    if (event.type === "turn/start") {
      for (const note of root.querySelectorAll(".open-turn")) {
        note.remove();
      }
      turn = { start: event.time, events: 1, size: size, calls: 0 };
      const section = el("section", "turn");
      section.dataset.turn = String(data.turn);
      section.append(el("h3", "turn-head", "turn " + data.turn));
      root.append(section);
    } else if (event.type === "user/message") {
      const who = data.untrusted ? "user (imported, untrusted)" : "user";
      container().append(message("user", who, data.text, event.seq));
    } else if (event.type === "tool/call") {
      if (turn) {
        turn.calls += 1;
      }
      const call = el("div", "call");
      call.dataset.call = data.call_id;
      call.dataset.status = "running";
      call.dataset.seq = String(event.seq);
      const who = el("div", "who", "tool call ");
      const replay = el("span", "replay", data.replay || "unsafe");
      replay.title = "replay policy";
      who.append(el("b", "", data.name), " ", replay, " ", el("span", "status", "running"));
      call.append(who, el("pre", "args", JSON.stringify(data.arguments)));
      container().append(call);
    } else if (event.type === "tool/result") {
      const call = root.querySelector('.call[data-call="' + CSS.escape(data.call_id) + '"]');
      if (call) {
        const status = data.status || "ok";
        call.dataset.status = status;
        call.querySelector(".status").textContent = status;
        if (status === "interrupted") {
          call.append(el("div", "mark",
            "INTERRUPTED: outcome unknown, recorded by recovery; it was not run again"));
        } else {
          call.append(el("pre", "output", data.output));
        }
      }
    } else if (event.type === "turn/end") {
      let text = "turn " + data.turn + " " + data.status + (data.error ? ": " + data.error : "");
      const end = el("div", "turn-end", text);
      end.dataset.status = data.status;
      if (turn) {
        const took = Math.max(0, event.time - turn.start) / 1000;
        end.append(" ", el("span", "usage",
          turn.events + " events, " + sizeText(turn.size) + ", " + turn.calls +
          " tool calls, " + took.toFixed(1) + " s"));
      }
      container().append(end);
      turn = null;
      if (cancel && cancel.recorded) {
        showEnded(data.status);
      } else if (cancel) {
        cancel.ended = data.status;
      }
    } else if (event.type !== "turn/checkpoint") {
      const other = el("div", "other", event.type + " (seq " + event.seq + ")");
      other.dataset.seq = String(event.seq);
      container().append(other);
    }
  }

  function start() {
    const url = "/sessions/" + sessionPath + "/stream?after=" + lastSeq;
    source = new EventSource(url);
    state.textContent = "connecting";
    source.onopen = function () {
      state.textContent = "following";
    };
    source.onmessage = function (message) {
      const seq = Number(message.lastEventId);
      if (seq <= lastSeq) {
        return; // already shown
      }
      render(JSON.parse(message.data), encoder.encode(message.data).length);
      lastSeq = seq;
      root.dataset.lastSeq = String(seq);
      state.textContent = "following · seq " + seq;
    };
    source.addEventListener("dropped", function () {
      state.textContent = "fell behind; reconnecting";
    });
    source.onerror = function () {
      state.textContent = "reconnecting";
    };
  }

  function showEnded(status) {
    cancel = null;
    cancelResult.textContent = "the turn ended: " + status;
    cancelResult.dataset.outcome = "ended";
  }

  async function cancelTurn() {
    if (!window.confirm("Cancel the turn running in session " + sessionId + "?")) {
      cancelResult.textContent = "not cancelled; nothing was sent";
      cancelResult.dataset.outcome = "dismissed";
      return;
    }
    cancelButton.disabled = true;
    cancel = { recorded: false, ended: null };
    cancelResult.textContent = "asking";
    cancelResult.dataset.outcome = "asking";
    try {
      const reply = await fetch("/sessions/" + sessionPath + "/cancel", {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          "X-Turnkeep-CSRF": csrf ? csrf.content : "",
        },
        body: JSON.stringify({ confirm: true }),
      });
      let detail = "";
      try {
        detail = (await reply.json()).message || "";
      } catch (error) {
        detail = reply.statusText;
      }
      if (reply.status === 202) {
        if (cancel.ended !== null) {
          showEnded(cancel.ended);
          return;
        }
        cancel.recorded = true;
        cancelResult.textContent = "cancel requested; waiting for the turn to end";
        cancelResult.dataset.outcome = "requested";
        return;
      }
      cancel = null;
      if (reply.status === 409) {
        cancelResult.textContent = "no running turn; nothing was requested";
        cancelResult.dataset.outcome = "no-running-turn";
      } else if (reply.status === 401 || reply.status === 403) {
        cancelResult.textContent = "refused: " + detail;
        cancelResult.dataset.outcome = "refused";
      } else {
        cancelResult.textContent = "failed (" + reply.status + "): " + detail;
        cancelResult.dataset.outcome = "failed";
      }
    } catch (error) {
      cancel = null;
      cancelResult.textContent = "failed: the service did not answer";
      cancelResult.dataset.outcome = "failed";
    } finally {
      cancelButton.disabled = false;
    }
  }

  if (cancelButton && cancelResult) {
    cancelButton.addEventListener("click", cancelTurn);
  }

  toggle.addEventListener("change", function () {
    if (toggle.checked) {
      start();
    } else if (source) {
      source.close();
      source = null;
      state.textContent = "paused";
    }
  });
  if (toggle.checked) {
    start();
  }
})();
