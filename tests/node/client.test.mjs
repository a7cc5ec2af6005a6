// The service driven by upstream's published TypeScript client (@vectorize-io/hindsight-client), as a
// node user would drive it. The server's base URL comes from HINDSIGHT_API_URL; tests/test_node_client.py
// starts a real `serve` and runs this file with `node --test`.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { HindsightClient, HindsightError, createClient, createConfig, sdk } from "@vectorize-io/hindsight-client";

const BASE_URL = process.env.HINDSIGHT_API_URL;
if (!BASE_URL) {
  throw new Error("HINDSIGHT_API_URL must name a running server, e.g. http://127.0.0.1:8888");
}

const client = new HindsightClient({ baseUrl: BASE_URL });
// The generated SDK over the same server, for the routes the convenience client has no method for.
const raw = createClient(createConfig({ baseUrl: BASE_URL }));

const FACTS = [
  {
    content: "Priya is the on-call engineer for the payments service this week.",
    context: "team chat",
    timestamp: "2024-03-04T09:00:00Z",
    tags: ["oncall"],
    document_id: "rota-week-10",
  },
  {
    content: "The payments service runs on PostgreSQL 16 in the Frankfurt region.",
    timestamp: "2024-03-01T12:00:00Z",
    tags: ["infra"],
  },
  { content: "Marco baked sourdough bread for the office party.", timestamp: "2024-02-20T18:00:00Z" },
];

function bankId() {
  return `node-${randomUUID().slice(0, 12)}`;
}

async function listBankIds() {
  const answer = await sdk.listBanks({ client: raw });
  assert.equal(answer.response.status, 200);
  return answer.data.banks.map((b) => b.bank_id);
}

describe("a bank's life through the npm client", () => {
  const bank = bankId();

  before(async () => {
    const created = await client.createBank(bank, { name: "Payments Assistant", mission: "Help the payments team on call" });
    assert.equal(created.bank_id, bank);
    assert.equal(created.name, "Payments Assistant");
    assert.equal(created.mission, "Help the payments team on call");
  });

  after(async () => {
    if ((await listBankIds()).includes(bank)) {
      await client.deleteBank(bank);
    }
  });

  test("the profile returns the name and mission it was created with", async () => {
    const profile = await client.getBankProfile(bank);
    assert.equal(profile.bank_id, bank);
    assert.equal(profile.name, "Payments Assistant");
    assert.equal(profile.mission, "Help the payments team on call");
    assert.deepEqual(Object.keys(profile.disposition).sort(), ["empathy", "literalism", "skepticism"]);
  });

  test("updating the bank keeps what was not sent", async () => {
    await client.createBank(bank, { mission: "Help the payments team on call, weekends too" });
    const profile = await client.getBankProfile(bank);
    assert.equal(profile.name, "Payments Assistant");
    assert.equal(profile.mission, "Help the payments team on call, weekends too");
    await client.createBank(bank, { mission: "Help the payments team on call" });
  });

  test("retainBatch stores every item and listMemories counts them", async () => {
    const stored = await client.retainBatch(bank, FACTS);
    assert.equal(stored.success, true);
    assert.equal(stored.items_count, FACTS.length);

    const one = await client.retain(bank, "Priya prefers to be paged on Slack rather than by phone.", {
      context: "team chat",
      timestamp: new Date("2024-03-05T08:00:00Z"),
      tags: ["oncall"],
    });
    assert.equal(one.success, true);
    assert.equal(one.items_count, 1);

    const listed = await client.listMemories(bank);
    assert.equal(listed.total, FACTS.length + 1);
    const texts = listed.items.map((m) => m.text);
    for (const fact of FACTS) {
      assert.ok(texts.includes(fact.content), `missing ${fact.content}`);
    }
    const tagged = listed.items.find((m) => m.text === FACTS[0].content);
    assert.deepEqual([...tagged.tags].sort(), ["oncall"]);
    assert.equal(tagged.document_id, "rota-week-10");
  });

  test("listMemories pages with limit and offset", async () => {
    const all = await client.listMemories(bank, { limit: 100 });
    const first = await client.listMemories(bank, { limit: 2, offset: 0 });
    const second = await client.listMemories(bank, { limit: 2, offset: 2 });
    assert.equal(first.items.length, 2);
    assert.equal(second.items.length, all.total - 2);
    assert.equal(first.total, all.total);
    const ids = [...first.items, ...second.items].map((m) => m.id);
    assert.equal(new Set(ids).size, all.total);
  });

  test("recall finds the memory that answers the question", async () => {
    const answer = await client.recall(bank, "Who is on call for the payments service?", { budget: "mid" });
    assert.ok(answer.results.length > 0);
    assert.equal(answer.results[0].text, FACTS[0].content);
    assert.ok(answer.results.every((r) => typeof r.id === "string" && r.id.length > 0));
  });

  test("recall with tags keeps only the tagged memories", async () => {
    const answer = await client.recall(bank, "payments service", { tags: ["infra"], tagsMatch: "all_strict" });
    assert.deepEqual(answer.results.map((r) => r.text), [FACTS[1].content]);
  });

  test("recall honours maxTokens", async () => {
    const answer = await client.recall(bank, "Who is on call for the payments service?", { maxTokens: 20 });
    assert.ok(answer.results.length < FACTS.length + 1);
  });

  test("a bad budget is refused with a client error naming the field", async () => {
    await assert.rejects(client.recall(bank, "anything", { budget: "huge" }), (err) => {
      assert.ok(err instanceof HindsightError);
      assert.ok(err.statusCode >= 400 && err.statusCode < 500, `status ${err.statusCode}`);
      assert.match(err.message, /budget/);
      return true;
    });
  });

  test("deleteBank removes the bank and nothing of it is recalled", async () => {
    const other = bankId();
    await client.retain(other, "Priya is the on-call engineer for the payments service this week.");
    assert.ok((await listBankIds()).includes(other));
    await client.deleteBank(other);
    assert.ok(!(await listBankIds()).includes(other));
    // the first bank is untouched
    const listed = await client.listMemories(bank);
    assert.equal(listed.total, FACTS.length + 1);
  });
});
