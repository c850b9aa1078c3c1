// `make demo` prints /login#token=...: the fragment never reaches the server or its logs; this
// moves it into the form and submits once, then removes it from the address bar.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const m = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  const form = document.getElementById("login");
  form.elements.token.value = decodeURIComponent(m[1]);
  form.submit();
});
