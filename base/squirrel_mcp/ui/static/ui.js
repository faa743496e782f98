// Progressive enhancement only: every page works without it.
// A change to a filter of the list submits its form, so there is no extra click.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-autosubmit] select, form[data-autosubmit] input[type=checkbox]")
    .forEach(function (field) {
      field.addEventListener("change", function () { field.form.requestSubmit(); });
    });
});
