// CPU of cdk-scheduler's re-filter, per row of the page, at one vCPU (node, no dependencies):
//   node bench/measure_cdk_refilter.js
// After each chunk of 10 sent, sendEventsToSQSAndDeleteRecords re-filters the WHOLE page:
//   records.filter(record => successfulIds.includes(extractIdForSQS(record)))
// (guiyom-e/cdk-scheduler, cdk-scheduler/lib/functions/sendEventsToSQSAndDeleteRecords.ts:73-75, with
// extractIdForSQS from cdk-scheduler/lib/functions/helpers.ts:40-48, copied below). The benchmark's
// model (punctual/bench/cdk_scheduler.py) charges this per row of the page per chunk: Models.cdk_refilter_us_per_row.
'use strict';

const extractIdForSQS = record => {
  const match = record.sk.S.match(/^(\d+#?[a-zA-Z0-9-_]*).*$/);
  if (match !== null && match.length >= 2) {
    return match[1].replace('#', '-').slice(0, 80);
  }
  throw new Error('Could not parse id');
};

const ROWS = 10000;
const ROUNDS = 200;
const records = Array.from({ length: ROWS }, (_, i) => ({
  pk: { S: 'scheduler' },
  sk: { S: `${1798135200000 + i}#t${String(i).padStart(7, '0')}` },
  payload: { M: { task: { N: String(i) }, kind: { S: 'bench' } } },
}));

let kept = 0;
for (let w = 0; w < 20; w++) kept += records.filter(r => ['x'].includes(extractIdForSQS(r))).length; // warm-up
const start = process.cpuUsage();
for (let k = 0; k < ROUNDS; k++) {
  const successfulIds = records.slice((k * 10) % ROWS, ((k * 10) % ROWS) + 10).map(extractIdForSQS);
  kept += records.filter(record => successfulIds.includes(extractIdForSQS(record))).length;
}
const used = process.cpuUsage(start);
const us = (used.user + used.system) / (ROUNDS * ROWS);
console.log(JSON.stringify({ node: process.version, rows: ROWS, rounds: ROUNDS, kept, us_per_row: Number(us.toFixed(4)) }));
