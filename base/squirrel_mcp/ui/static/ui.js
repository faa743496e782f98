// Progressive enhancement only: every page works without it.
// A change to a filter of the list submits its form, so there is no extra click.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-autosubmit] select, form[data-autosubmit] input[type=checkbox]")
    .forEach(function (field) {
      field.addEventListener("change", function () { field.form.requestSubmit(); });
    });
  // Enter in a field of a form with several buttons presses the field's own (a new project's
  // name: Move), not the form's first.
  document.querySelectorAll("input[data-enter]").forEach(function (field) {
    field.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") { return; }
      var button = field.form.querySelector("button[value='" + field.dataset.enter + "']");
      if (button) { event.preventDefault(); field.form.requestSubmit(button); }
    });
  });
});
