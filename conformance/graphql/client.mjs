// The GitOps API driven by graphql-js, the reference GraphQL implementation, as GraphiQL,
// code generators and schema checkers drive an API: the standard introspection query, the
// schema built from its answer, typed queries with variables validated against that schema,
// a field error, the GraphQL-over-HTTP media types, and abuse refused quickly.
//
//   node client.mjs http://127.0.0.1:PORT TOKEN path/to/schema.graphql [RUNTIME_TOKEN]
//
// With RUNTIME_TOKEN, also the query a runtime's source server sends (go-sdk's
// GetVersionSourceByRuntime), validated and run with that token.
//
// Prints one line per check and exits 1 when any failed (make conformance-graphql runs it
// from the `graphql_client` test, which starts the control plane it talks to).
import { readFileSync } from "node:fs";
import {
  buildClientSchema,
  buildSchema,
  getIntrospectionQuery,
  lexicographicSortSchema,
  parse,
  printSchema,
  validate,
  version,
} from "graphql";

const [base, token, sdlPath, runtimeToken] = process.argv.slice(2);
if (!base || !token || !sdlPath) {
  console.error("usage: node client.mjs BASE_URL TOKEN SCHEMA_SDL");
  process.exit(2);
}
const url = `${base}/2.0/api/graphql`;
let failed = 0;

function check(name, ok, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `: ${detail}`}`);
  if (!ok) failed += 1;
}

async function post(body, accept = "application/json", as = token) {
  const started = performance.now();
  const response = await fetch(url, {
    method: "POST",
    headers: {
      authorization: `Bearer ${as}`,
      "content-type": "application/json",
      accept,
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = { unparsed: text };
  }
  return {
    status: response.status,
    type: response.headers.get("content-type"),
    json,
    ms: performance.now() - started,
  };
}

console.log(`graphql-js ${version} against ${url}`);

// 1. The standard introspection query, and a schema built from its answer.
const introspection = await post({ query: getIntrospectionQuery() });
check(
  "getIntrospectionQuery() is answered 200 without errors",
  introspection.status === 200 && !introspection.json.errors && introspection.json.data,
  `${introspection.status} ${JSON.stringify(introspection.json).slice(0, 300)}`,
);
let schema;
try {
  schema = buildClientSchema(introspection.json.data);
  check("buildClientSchema accepts the answer", true);
} catch (e) {
  check("buildClientSchema accepts the answer", false, e.message);
}
if (schema) {
  // The schema served is the committed one, descriptions included: both printed by graphql-js,
  // types in name order (printSchema leaves out the standard scalars and directives, which
  // each implementation defines for itself).
  const print = (s) => printSchema(lexicographicSortSchema(s)).split("\n");
  const served = print(schema);
  const committed = print(buildSchema(readFileSync(sdlPath, "utf8")));
  const at = served.findIndex((line, i) => line !== committed[i]);
  const same = at === -1 && served.length === committed.length;
  check(
    "the introspected schema is the committed schema.graphql",
    same,
    same ? "" : `line ${at + 1}: served ${JSON.stringify(served[at])}, committed ${JSON.stringify(committed[at])}`,
  );
}

// 2. A typed query with variables, validated by graphql-js against the introspected schema.
const typed = `query Apps($first: Int!, $filter: ApplicationFilter) {
  applications(first: $first, filter: $filter) { totalCount items { runtime name syncStatus } }
  me { name account }
}`;
if (schema) {
  const errors = validate(schema, parse(typed));
  check("the typed query validates against the introspected schema", errors.length === 0, errors.join("; "));
}
const apps = await post({ query: typed, variables: { first: 10, filter: { runtime: "prod" } } });
check(
  "the typed query with variables is answered 200 with data",
  apps.status === 200 && !apps.json.errors && apps.json.data?.applications?.totalCount >= 1,
  `${apps.status} ${JSON.stringify(apps.json).slice(0, 300)}`,
);
if (runtimeToken) {
  // go-sdk's query, word for word (pkg/graphql/promotion_template.go).
  const bySdk = `query ($applicationMetadata: Object!) {
    promotionTemplateByRuntime(applicationMetadata: $applicationMetadata) {
    versionSource {
      file
      jsonPath
    }
  }
}`;
  if (schema) {
    const errors = validate(schema, parse(bySdk));
    check("go-sdk's promotionTemplateByRuntime query validates against the schema", errors.length === 0, errors.join("; "));
  }
  const variables = { applicationMetadata: { name: "web", namespace: "argocd", labels: { tier: "web" } } };
  const asked = await post({ query: bySdk, variables }, "application/json", runtimeToken);
  check(
    "a runtime's token is answered (null: no template applies)",
    asked.status === 200 && !asked.json.errors && asked.json.data?.promotionTemplateByRuntime === null,
    `${asked.status} ${JSON.stringify(asked.json).slice(0, 300)}`,
  );
  const byUser = await post({ query: bySdk, variables });
  check(
    "a user's token is refused FORBIDDEN",
    byUser.json.errors?.[0]?.extensions?.code === "FORBIDDEN",
    `${byUser.status} ${JSON.stringify(byUser.json).slice(0, 300)}`,
  );
}
check(
  "application/json is the default media type",
  apps.type?.startsWith("application/json"),
  apps.type,
);

// 3. A field error: 200, data null, the code in extensions.
const missing = `query Missing($name: String!) { runtime(name: $name) { name } }`;
for (const accept of ["application/json", "application/graphql-response+json, application/json;q=0.9"]) {
  const answer = await post({ query: missing, variables: { name: "nope" } }, accept);
  const error = answer.json.errors?.[0];
  check(
    `a field error is 200 with data null and extensions.code NOT_FOUND (Accept: ${accept})`,
    answer.status === 200 && answer.json.data === null && error?.extensions?.code === "NOT_FOUND"
      && JSON.stringify(error?.path) === '["runtime"]',
    `${answer.status} ${JSON.stringify(answer.json)}`,
  );
  const wanted = accept.startsWith("application/graphql-response+json")
    ? "application/graphql-response+json"
    : "application/json";
  check(`the answer is ${wanted}`, answer.type?.startsWith(wanted), answer.type);
}

// 4. Request errors: 400 without data, for both media types.
for (const accept of ["application/json", "application/graphql-response+json"]) {
  const invalid = await post({ query: "{ runtimes { nope } }" }, accept);
  check(
    `a query that does not validate is 400 without data (Accept: ${accept})`,
    invalid.status === 400 && !("data" in invalid.json) && invalid.json.errors?.length > 0,
    `${invalid.status} ${JSON.stringify(invalid.json)}`,
  );
}
const notGraphql = await post("[1, 2, 3]");
check("a body that is not a GraphQL request is 400", notGraphql.status === 400, `${notGraphql.status}`);

// 5. Abuse is refused with a 4xx within a second, and the API goes on answering.
const deep = `{ __schema { types { fields { type { ${"ofType { ".repeat(56)}name${" }".repeat(56)} } } } } }`;
const aliases = (n) => `{ ${Array.from({ length: n }, (_, i) => `a${i}: me { name }`).join(" ")} }`;
const cycle = "query Q { me { ...A } } fragment A on Me { ...B } fragment B on Me { ...A }";
for (const [name, query] of [["depth 60", deep], ["3,000 aliases", aliases(3000)], ["20,000 aliases", aliases(20000)], ["a fragment cycle", cycle]]) {
  const body = JSON.stringify({ query });
  if (body.length > 64 * 1024) {
    const answer = await post(body);
    check(`${name} (a ${body.length}-byte body) is refused 413 within 1 s`, answer.status === 413 && answer.ms < 1000, `${answer.status} in ${answer.ms.toFixed(0)} ms`);
  } else {
    const answer = await post(body);
    check(
      `${name} is refused 400 within 1 s`,
      answer.status === 400 && answer.ms < 1000,
      `${answer.status} in ${answer.ms.toFixed(0)} ms: ${JSON.stringify(answer.json).slice(0, 200)}`,
    );
  }
}
const after = await post({ query: "{ me { name } }" });
check("a normal query after the abuse is answered", after.status === 200 && after.json.data?.me?.name, `${after.status}`);

console.log(failed === 0 ? "graphql-js: every check passed" : `graphql-js: ${failed} check(s) failed`);
process.exit(failed === 0 ? 0 : 1);
