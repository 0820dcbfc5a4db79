// A private corner of the machine's Redis and MariaDB for one test run: a unique key prefix
// and database, removed by `drop` (call it in afterAll/finally). While it lives, no other test
// file restarts the services (services-lock.ts).
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { MysqlRecords } from '../../src/store/cluster/mysql-records.js';
import { holdServicesShared } from './services-lock.js';

export const REDIS_URL = 'redis://127.0.0.1:6379/0';

export interface ClusterStateScope {
  redisURL: string;
  mysqlURL: string;
  keyPrefix: string;
  drop(): Promise<void>;
}

export function clusterStateScope(): ClusterStateScope {
  const tag = randomBytes(4).toString('hex');
  const mysqlURL = `mysql://root@127.0.0.1:3306/cube_test_${tag}`;
  const keyPrefix = `cube:test:${tag}:`;
  const release = holdServicesShared();
  return {
    redisURL: REDIS_URL,
    mysqlURL,
    keyPrefix,
    async drop() {
      try {
        await dropState(keyPrefix, mysqlURL);
      } finally {
        release();
      }
    },
  };
}

async function dropState(keyPrefix: string, mysqlURL: string): Promise<void> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 3 });
  try {
    await r.connect();
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 500);
      if (keys.length > 0) await r.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  await new MysqlRecords(mysqlURL).dropDatabase();
}
