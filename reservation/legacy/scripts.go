package legacy

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each runs atomically in Redis, so a reserve's check and
// decrement of every line, or a claim's look at a record and its counter
// change, cannot interleave with another script. Every script that changes
// a counter is idempotent per reservation token: it looks at the
// reservation's record (state active, claimed, released, expired,
// resynced) and changes the counters only on a transition, so a write
// repeated after a timeout, or a mirror arriving after resync-redis wrote
// the counters, changes nothing twice.
//
// Every script gets the same ARGV head: 1 the counter key template, 2 the
// held-set template, 3 the record key template, 4 the expiry set, 5 the
// time (Unix ms, holdfast's clock). Keys derived from a record (its lines'
// counters) are built inside the script from the templates: one Redis
// server, not a cluster.

const luaHead = `
local ctpl, htpl, rtpl, expkey, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local function sub(tpl, shop, item, loc)
  return (tpl:gsub('{shop}', shop):gsub('{item}', item):gsub('{location}', loc))
end
local function ckey(shop, item, loc) return sub(ctpl, shop, item, loc) end
local function hkey(shop, item, loc) return sub(htpl, shop, item, loc) end
local function rkey(tok) return (rtpl:gsub('{token}', tok)) end
local function lines(s)
  local out = {}
  for item, loc, qty in string.gmatch(s or '', '(%d+):(%d+):(%d+)') do
    out[#out+1] = {item, loc, tonumber(qty)}
  end
  return out
end
local function num(x) return tonumber(x or '0') or 0 end
local function state_of(st, lns)
  if st then return st end
  if lns then return 'active' end
  return nil
end
`

// reserveScript decides a reserve as the legacy system did (authority
// redis), or only checks what it would decide (dry run, authority holdfast
// after an insufficient answer of the engine). A key already used answers
// its reservation (replay) or conflict; otherwise, for every line, the first
// location whose counter covers the quantity; all lines or none. A decision
// decrements the counters, records the reservation and indexes it.
//
// KEYS: 1 idempotency key, 2 record key (of the new token).
// ARGV (after the head): 6 mode (reserve | check), 7 shop, 8 token,
// 9 request hash (hex), 10 idempotency key as given, 11 ttl ms,
// 12 retention ms, 13 line count, then per line: item, qty, location
// count, locations.
// Returns {'ok', token, lines, expires_at} | {'replay', token, lines,
// expires_at, state} | {'conflict', token} | {'insufficient', line,
// "qty@location,..."}.
var reserveScript = redis.NewScript(luaHead + `
local mode, shop, tok, hash, ikey = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local ttl, keep, n = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
if mode == 'reserve' then
  local old = redis.call('GET', KEYS[1])
  if old then
    local h = redis.call('HMGET', rkey(old), 'request_hash', 'lines', 'expires_at', 'state')
    if h[2] then
      if h[1] and h[1] ~= hash then return {'conflict', old} end
      local st = state_of(h[4], h[2])
      if st == 'active' and num(h[3]) <= now then st = 'expired' end
      return {'replay', old, h[2], h[3], st}
    end
  end
end
local i, chosen = 14, {}
for l = 1, n do
  local item, qty, nl = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2])
  i = i + 3
  local seen, pick = {}, nil
  for j = 0, nl - 1 do
    local loc = ARGV[i+j]
    local have = tonumber(redis.call('GET', ckey(shop, item, loc)) or '0')
    if not pick and have >= qty then pick = loc end
    seen[#seen+1] = have .. '@' .. loc
  end
  i = i + nl
  if not pick then return {'insufficient', l, table.concat(seen, ',')} end
  chosen[#chosen+1] = {item, pick, qty}
end
if mode == 'check' then return {'ok'} end
local parts = {}
for _, c in ipairs(chosen) do
  redis.call('DECRBY', ckey(shop, c[1], c[2]), c[3])
  redis.call('SADD', hkey(shop, c[1], c[2]), tok)
  parts[#parts+1] = c[1] .. ':' .. c[2] .. ':' .. c[3]
end
local ls, exp = table.concat(parts, ','), now + ttl
redis.call('HSET', KEYS[2], 'shop_id', shop, 'lines', ls, 'expires_at', exp, 'state', 'active',
  'idempotency_key', ikey, 'request_hash', hash, 'authority', 'redis', 'created_at', now)
redis.call('PEXPIRE', KEYS[2], ttl + keep)
redis.call('ZADD', expkey, exp, tok)
redis.call('SET', KEYS[1], tok, 'PX', ttl + keep)
return {'ok', tok, ls, tostring(exp)}
`)

// mirrorScript writes a reservation the engine made (authority holdfast):
// the dual write. It decrements the counters of the lines as the engine
// chose them, whatever they hold (a counter may go below zero: Redis must
// keep the full picture, and the drift check reports it), and records and
// indexes the reservation. A token already recorded changes nothing.
//
// KEYS: 1 idempotency key, 2 record key.
// ARGV: 6 shop, 7 token, 8 request hash, 9 idempotency key, 10 expires_at
// ms, 11 retention ms, 12 lines.
// Returns {'ok'} when every counter covered its line, {'insufficient'}
// when one did not (what the legacy counter would have answered), or
// {'exists'}.
var mirrorScript = redis.NewScript(luaHead + `
local shop, tok, hash, ikey, exp, keep = ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11])
if redis.call('EXISTS', KEYS[2]) == 1 then return {'exists'} end
local would = 'ok'
for _, l in ipairs(lines(ARGV[12])) do
  local left = redis.call('DECRBY', ckey(shop, l[1], l[2]), l[3])
  if left < 0 then would = 'insufficient' end
  redis.call('SADD', hkey(shop, l[1], l[2]), tok)
end
redis.call('HSET', KEYS[2], 'shop_id', shop, 'lines', ARGV[12], 'expires_at', exp, 'state', 'active',
  'idempotency_key', ikey, 'request_hash', hash, 'authority', 'holdfast', 'created_at', now)
redis.call('PEXPIRE', KEYS[2], math.max(exp - now, 0) + keep)
redis.call('ZADD', expkey, exp, tok)
redis.call('SET', KEYS[1], tok, 'PX', math.max(exp - now, 0) + keep)
return {would}
`)

// claimScript ends a reservation whose claim deducted the ledger. A held
// reservation leaves its counters alone (they already count it out); one
// whose units had gone back (expired, released) or that Redis never saw
// takes them off again: a claim consumes stock. A claimed or resynced
// record changes nothing.
//
// KEYS: 1 record key. ARGV: 6 token, 7 shop, 8 lines (the engine's, for a
// record that is missing), 9 retention ms.
// Returns {prior state}: active, expired (active but past its expiry),
// released, claimed, resynced or absent.
var claimScript = redis.NewScript(luaHead + `
local tok, keep = ARGV[6], tonumber(ARGV[9])
local h = redis.call('HMGET', KEYS[1], 'state', 'lines', 'shop_id', 'expires_at')
local st = state_of(h[1], h[2])
if st == 'claimed' or st == 'resynced' then
  redis.call('HSET', KEYS[1], 'state', 'claimed')
  return {st}
end
local shop, ls = h[3] or ARGV[7], h[2] or ARGV[8]
local prior = st or 'absent'
for _, l in ipairs(lines(ls)) do
  if st == 'active' then
    redis.call('SREM', hkey(shop, l[1], l[2]), tok)
  else
    redis.call('DECRBY', ckey(shop, l[1], l[2]), l[3])
  end
end
if st == 'active' and num(h[4]) <= now then prior = 'expired' end
redis.call('ZREM', expkey, tok)
redis.call('HSET', KEYS[1], 'state', 'claimed', 'shop_id', shop, 'lines', ls)
redis.call('PEXPIRE', KEYS[1], keep)
return {prior}
`)

// releaseScript gives a held reservation's units back to its counters.
//
// KEYS: 1 record key. ARGV: 6 token, 7 retention ms.
// Returns {'released', qty} | {'expired', 0} (it had expired; its units
// are back, or are given back now) | {'duplicate', 0} | {'claimed', 0} |
// {'resynced', 0} | {'absent', 0} (Redis had no record: it keeps one saying
// released, so that a write about the reservation arriving later sees it
// ended).
var releaseScript = redis.NewScript(luaHead + `
local tok, keep = ARGV[6], tonumber(ARGV[7])
local h = redis.call('HMGET', KEYS[1], 'state', 'lines', 'shop_id', 'expires_at')
local st = state_of(h[1], h[2])
if not st then
  -- A tombstone: a write about this reservation that arrives later (a
  -- late dual write of its reserve, resync-redis) sees it ended.
  redis.call('HSET', KEYS[1], 'state', 'released')
  redis.call('PEXPIRE', KEYS[1], keep)
  return {'absent', 0}
end
if st == 'released' then return {'duplicate', 0} end
if st ~= 'active' and st ~= 'expired' then return {st, 0} end
local qty, out = 0, 'released'
if st == 'active' then
  for _, l in ipairs(lines(h[2])) do
    redis.call('INCRBY', ckey(h[3], l[1], l[2]), l[3])
    redis.call('SREM', hkey(h[3], l[1], l[2]), tok)
    qty = qty + l[3]
  end
  if num(h[4]) <= now then out, qty = 'expired', 0 end
else
  out = 'expired'
end
redis.call('ZREM', expkey, tok)
redis.call('HSET', KEYS[1], 'state', 'released')
redis.call('PEXPIRE', KEYS[1], keep)
return {out, qty}
`)

// extendScript sets a live reservation's expiry: to now + ttl (mode ttl,
// authority redis: only while it is live) or to the engine's expiry (mode
// set, the dual write of an extend the engine decided).
//
// KEYS: 1 record key. ARGV: 6 token, 7 mode, 8 ttl or expires_at ms,
// 9 retention.
// Returns {'ok', expires_at} | {'expired'} | {state} | {'absent'}.
var extendScript = redis.NewScript(luaHead + `
local tok, mode, v, keep = ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local h = redis.call('HMGET', KEYS[1], 'state', 'lines', 'expires_at')
local st = state_of(h[1], h[2])
if not st then return {'absent'} end
if st ~= 'active' then return {st} end
if mode == 'ttl' and num(h[3]) <= now then return {'expired'} end
local exp = v
if mode == 'ttl' then exp = now + v end
redis.call('HSET', KEYS[1], 'expires_at', exp)
redis.call('PEXPIRE', KEYS[1], math.max(exp - now, 0) + keep)
redis.call('ZADD', expkey, exp, tok)
return {'ok', tostring(exp)}
`)

// sweepScript expires up to ARGV[6] reservations whose expiry has passed:
// their units go back to their counters. The legacy sweeper.
// Returns {expired, looked at}.
var sweepScript = redis.NewScript(luaHead + `
local toks = redis.call('ZRANGEBYSCORE', expkey, '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))
local n = 0
for _, tok in ipairs(toks) do
  local rk = rkey(tok)
  local h = redis.call('HMGET', rk, 'state', 'lines', 'shop_id', 'expires_at')
  local st = state_of(h[1], h[2])
  if st == 'active' and num(h[4]) > now then
    redis.call('ZADD', expkey, h[4], tok)
  else
    if st == 'active' then
      for _, l in ipairs(lines(h[2])) do
        redis.call('INCRBY', ckey(h[3], l[1], l[2]), l[3])
        redis.call('SREM', hkey(h[3], l[1], l[2]), tok)
      end
      redis.call('HSET', rk, 'state', 'expired')
      n = n + 1
    end
    redis.call('ZREM', expkey, tok)
  end
end
return {n, #toks}
`)

// resyncScript rewrites one pool's counter from the engine's view, read
// under the pool's ledger row lock (holdfast resync-redis):
//
//   - every reservation the engine read as live is recorded, held and
//     indexed, unless Redis has it released, claimed or expired meanwhile
//     (it ended after the engine's read: its units are not held);
//   - every record held in the pool that the engine did not read as live
//     and has finished (ARGV's ended list) takes the engine's end: claimed,
//     released or expired, so that its units are no longer held and a
//     claim or release of it arriving late changes the counter exactly as
//     it would have (a late claim of a claimed record nothing; a forced
//     claim of a released one takes the units again);
//   - any other record held in the pool (a reserve that committed after
//     the engine's read, or one only Redis has) stays held;
//
// and then counter = on_hand - what stays held.
//
// KEYS: 1 counter, 2 held set. ARGV: 6 shop, 7 item, 8 location, 9 on_hand,
// 10 retention ms, 11 live count, then per live line: token, qty,
// expires_at ms; then the ended count and, per ended reservation, its
// token and how it ended.
// Returns {1 when the counter existed else 0, old counter, new counter,
// records created, records resynced}.
var resyncScript = redis.NewScript(luaHead + `
local shop, item, loc = ARGV[6], ARGV[7], ARGV[8]
local onhand, keep, n = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local live, held, i = {}, 0, 12
for _ = 1, n do
  live[ARGV[i]] = {tonumber(ARGV[i+1]), tonumber(ARGV[i+2])}
  i = i + 3
end
local ended = {}
for _ = 1, tonumber(ARGV[i]) do
  ended[ARGV[i+1]] = ARGV[i+2]
  i = i + 2
end
local function qty_here(ls)
  for _, l in ipairs(lines(ls)) do
    if l[1] == item and l[2] == loc then return l[3] end
  end
  return nil
end
local created, dropped = 0, 0
for _, tok in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not live[tok] then
    local rk = rkey(tok)
    local h = redis.call('HMGET', rk, 'state', 'lines')
    local st = state_of(h[1], h[2])
    local q = qty_here(h[2])
    if st == 'active' and q and not ended[tok] then
      held = held + q
    else
      redis.call('SREM', KEYS[2], tok)
      if st == 'active' then
        redis.call('HSET', rk, 'state', ended[tok] or 'resynced')
        redis.call('ZREM', expkey, tok)
        dropped = dropped + 1
      end
    end
  end
end
for tok, l in pairs(live) do
  local rk = rkey(tok)
  local h = redis.call('HMGET', rk, 'state', 'lines')
  local st = state_of(h[1], h[2])
  if st == 'released' or st == 'claimed' or st == 'expired' then
    redis.call('SREM', KEYS[2], tok)
  else
    local ls = h[2]
    if not qty_here(ls) then
      local mine = item .. ':' .. loc .. ':' .. l[1]
      if ls and ls ~= '' then ls = ls .. ',' .. mine else ls = mine end
    end
    if not st then
      redis.call('HSET', rk, 'shop_id', shop, 'lines', ls, 'expires_at', l[2], 'state', 'active',
        'authority', 'holdfast', 'created_at', now)
      created = created + 1
    else
      redis.call('HSET', rk, 'lines', ls, 'expires_at', l[2], 'state', 'active')
    end
    redis.call('PEXPIRE', rk, math.max(l[2] - now, 0) + keep)
    redis.call('ZADD', expkey, l[2], tok)
    redis.call('SADD', KEYS[2], tok)
    held = held + l[1]
  end
end
local raw = redis.call('GET', KEYS[1])
local new = onhand - held
redis.call('SET', KEYS[1], new)
if raw then return {1, tonumber(raw), new, created, dropped} end
return {0, 0, new, created, dropped}
`)
