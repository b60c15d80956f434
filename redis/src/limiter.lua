-- llm-failover: the limiter of one (provider, model, account), shared through Redis.
--
-- A port of src/ratelimit/{bucket,stated,paced,key_state}.rs, rule for rule and constant for
-- constant: the same buckets, the same learned windows and stated-remaining truth, the same
-- drains, gate and learned pace. tests/it/shared_limits.rs runs this script and the in-memory
-- store through the same sequences on one virtual clock and compares every answer.
--
-- KEYS[1] the state (one value: MessagePack, which keeps doubles exact), KEYS[2] the
-- half-open probe token. Both share one hash tag, so one call is atomic and Redis Cluster
-- routes it. A reservation charged to budgets also names their ledgers, KEYS[3..] (one
-- integer each: nano-dollars spent or reserved in one budget's window; one Redis only, as
-- a Cluster would route them elsewhere).
-- ARGV[1] operation: reserve | turn | refund | raise | check | peek
-- ARGV[2] now in microseconds, or "" to read TIME (production: every host agrees on Redis's
--         clock, never its own)
-- ARGV[3] the state's TTL in milliseconds (refreshed on every write)
-- ARGV[4] the latency allowance in microseconds
-- ARGV[5] the operation's arguments, JSON
-- Returns JSON. Every instant crosses the wire as microseconds from the script's now.

local op, now_arg, ttl, allowance = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local args = cjson.decode(ARGV[5])

local now
if now_arg ~= '' then
  now = tonumber(now_arg)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local SEC = 1000000
local MINUTE, HOUR, DAY = 60 * SEC, 3600 * SEC, 86400 * SEC
local SHORT = 600 * SEC        -- a window longer than this is day-scale
local MAX_LOG = 8192
local MAX_AGE = 120 * SEC
local MIN_DEPTH, SNAP, DEFAULT_WINDOW = 0.05, 0.25, 60 * SEC
local DRY_UNITS, DRY_RUN, REREAD = 3.0, 2, 0.125
local P_START, P_DECREASE, P_INCREASE = 1.0, 0.8, 0.02
local P_INTERVAL, P_MEASURE, P_BURST, P_MIN = 5 * SEC, 10 * SEC, 1 * SEC, 1.0 / 60.0
local DIMS = { 'r', 't', 'i', 'o' }
local DIM_NAMES = { r = 'requests', t = 'tokens', i = 'input_tokens', o = 'output_tokens' }

---------------------------------------------------------------------------------- bucket
-- {c = capacity, cap = highest level, r = units per microsecond, a = allowance (us),
--  l = level, t = updated}

local function cap_for(a, c, r) return math.max(c - r * a, math.min(c, 1.0)) end

local function b_new(limit, window, at, a)
  local c = math.max(limit, 1)
  local w = math.max(window, 1000)
  local r = c / w
  local b = { c = c, cap = c, r = r, a = 0, l = c, t = at }
  if a and a > 0 then
    b.a = a
    b.cap = cap_for(a, c, r)
    b.l = math.min(b.l, b.cap)
  end
  return b
end

local function b_refill(b, at)
  if at > b.t then
    b.l = math.min(b.l + (at - b.t) * b.r, b.cap)
    b.t = at
  end
end
local function b_level(b, at) b_refill(b, at); return b.l end
local function b_window(b) return b.c / b.r end
local function b_wait_for(b, after) if after >= 0 then return 0 end; return -after / b.r end
-- The wait for `n`, or nil when it exceeds the capacity.
local function b_peek(b, n, at)
  if n > b.c then return nil end
  b_refill(b, at)
  return b_wait_for(b, b.l - n)
end
local function b_refund(b, n, at) b_refill(b, at); b.l = math.min(b.l + n, b.cap) end
local function b_charge(b, n, at) b_refill(b, at); b.l = b.l - n end
local function b_tighten(b, rem, at) b_refill(b, at); b.l = math.min(b.l, rem) end
local function b_set_level(b, lvl, at) b_refill(b, at); b.l = math.min(lvl, b.cap) end
local function b_drain(b, at) b_refill(b, at); b.l = math.min(b.l, 0) end
-- Sets the level to `lvl` as of `at`; a bucket another process's call has moved past `at`
-- since (a report held back, told with a later call) keeps what refilled after `at`.
local function b_set_level_since(b, lvl, at)
  if at < b.t then b.l = math.min(lvl + (b.t - at) * b.r, b.cap) else b_set_level(b, lvl, at) end
end
local function b_set_limit(b, limit, window, at)
  b_refill(b, at)
  local c = math.max(limit, 1)
  local w = math.max(window, 1000)
  b.c = c
  b.r = c / w
  b.cap = cap_for(b.a, c, b.r)
  b.l = math.min(b.l, b.cap)
end
local function b_full_at(b, at)
  b_refill(b, at)
  if b.l >= b.cap then return nil end
  return at + math.min((b.cap - b.l) / b.r, 1e15)
end

---------------------------------------------------------------------------------- stated
-- {b = bucket, lw = learned window, ld = its depth, pr = documented window or nil,
--  ap = booking applied last, fx = next fixed-window boundary (nil: a bucket),
--  ltt/ltl = last truth (when, level), ft = first truth, ch = charged since, dry,
--  nr = the last stated level came without a reset}

local function learn(lw, ld, limit, rem, until_reset, prior)
  if limit == 0 or rem >= limit or until_reset <= 0 then return lw, ld end
  local depth = (limit - rem) / limit
  if depth >= MIN_DEPTH and depth >= ld then
    local implied = until_reset / depth
    local window = implied
    if prior and math.abs(implied / prior - 1) <= SNAP then window = prior end
    return window, depth
  end
  if until_reset > lw then return until_reset, ld end
  return lw, ld
end

local function sign(gain, bucket_gain, elapsed, window, limit)
  if gain >= limit / 2 and elapsed < window / 4 then return 'jump' end
  if bucket_gain < DRY_UNITS then return 'unclear' end
  if gain < bucket_gain / 4 then return 'dry' end
  if gain >= bucket_gain / 2 then return 'steady' end
  return 'unclear'
end

local function s_new(limit, prior, a, at)
  local lw = prior or DEFAULT_WINDOW
  return { b = b_new(limit, lw, at, a), lw = lw, ld = 0, pr = prior, ch = 0, dry = 0 }
end

local function s_roll(s, at)
  if not s.fx or at < s.fx then return end
  local w = math.max(s.lw, 1000)
  local passed = 1 + math.floor((at - s.fx) / w)
  b_set_level(s.b, b_level(s.b, at) + math.floor(s.b.c) * passed, at)
  s.fx = s.fx + w * passed
end

local function s_level(s, at) s_roll(s, at); return b_level(s.b, at) end

local function s_wait(s, n, at)
  s_roll(s, at)
  if not s.fx then return b_peek(s.b, n, at) end
  if b_peek(s.b, n, at) == nil then return nil end
  local missing = n - b_level(s.b, at)
  if missing <= 0 then return 0 end
  local windows = math.max(math.ceil(missing / math.floor(s.b.c)), 1)
  return math.max(s.fx + s.lw * (windows - 1) - at, 0)
end

local function s_charge(s, n, at) s_roll(s, at); b_charge(s.b, n, at); s.ch = s.ch + n end

-- A fixed window whose boundary was not seen: the window that held the first stated level
-- ends a window after it at the latest.
local function s_fix(s, at)
  local first = s.ft or at
  local k = math.max(1, math.floor((at - first) / s.lw) + 1)
  s.fx = first + s.lw * k
end

local function s_shape(s, limit, at)
  local window = s.lw
  if s.fx then window = s.lw * 1000 end
  local bw = b_window(s.b)
  if limit ~= math.floor(s.b.c) or math.abs(window - bw) > 1e-3 then
    b_set_limit(s.b, limit, window, at)
  end
end

-- A 429 about it. A refusal of a limit stated without a reset while it is modelled as a
-- bucket is a fixed window (the bucket let the request go): waited out to its boundary.
-- Returns the boundary of a fixed window the drain leaves closed (none left before it).
local function s_drain(s, at)
  s_roll(s, at)
  local refused_open = s.nr and s.ltt and not s.fx
  b_drain(s.b, at)
  if s.ltt then
    s.ltt = at
    s.ltl = b_level(s.b, at)
    s.ch = 0
  end
  if refused_open then
    s_fix(s, at)
    s_shape(s, math.floor(s.b.c), at)
  end
  if s.fx and b_level(s.b, at) < 1 then return s.fx end
  return nil
end

local function s_full_at(s, at)
  s_roll(s, at)
  local full = b_full_at(s.b, at)
  if not full then return nil end
  if not s.fx then return full end
  local c = math.floor(s.b.c)
  local missing = c - b_level(s.b, at)
  local windows = math.max(math.ceil(missing / math.max(c, 1)), 1)
  return s.fx + s.lw * (windows - 1)
end

-- Read against the last statement it was read against (answers 100 ms apart never show a
-- bucket's refill; seconds of them do): returns whether this one is the next reference (it
-- said something, or the reference is REREAD of a window old). As stated.rs's `classify`.
local function s_classify(s, truth, limit, at)
  if not s.ltt then return true end
  local elapsed = math.max(at - s.ltt, 0)
  local window = s.lw
  local dry_level = s.ltl - s.ch
  local bucket_gain = 0
  if not s.fx then
    bucket_gain = math.min(elapsed * limit / math.max(window, 1000), math.max(limit - dry_level, 0))
  end
  local gain = truth - dry_level
  local closed = truth < 1 and dry_level + bucket_gain >= 1
  local read
  if closed then
    s.dry = DRY_RUN - 1
    read = 'dry'
  else
    read = sign(gain, bucket_gain, elapsed, window, limit)
  end
  if read == 'jump' then
    s.fx = at + window
    s.dry = 0
  elseif read == 'dry' and not s.fx then
    s.dry = s.dry + 1
    if s.dry >= DRY_RUN then s_fix(s, at) end
  elseif read == 'steady' and not s.fx then
    s.dry = 0
  elseif read == 'unclear' and elapsed < window * REREAD then
    return false
  end
  s_shape(s, limit, at)
  return true
end

-- w = {limit, remaining, reset (us from now, absent: unknown), per}
local function s_observe(s, w, booked, inflight, at)
  if booked and s.ap and booked < s.ap then return end
  s_roll(s, at)
  if booked then s.ap = booked end
  local limit = math.floor(s.b.c)
  if w.limit and w.limit > 0 then limit = w.limit end
  if w.remaining and w.reset then
    s.lw, s.ld = learn(s.lw, s.ld, limit, w.remaining, math.max(w.reset, 0), s.pr)
  end
  s_shape(s, limit, at)
  if not w.remaining then return end
  if not booked then
    b_tighten(s.b, w.remaining, at)
    return
  end
  local truth = w.remaining - inflight
  s.nr = not w.reset
  local read = true
  if s.nr then read = s_classify(s, truth, limit, at) end
  b_set_level_since(s.b, truth, at)
  if read then
    s.ltt = math.max(at, s.b.t)
    s.ltl = b_level(s.b, s.ltt)
    s.ch = 0
  end
  if not s.ft then s.ft = at end
end

---------------------------------------------------------------------------------- paced
-- {b, rate, ss = slow start, cr = rate at the last cut, chg = changed, sb = first booking
--  under the current rate, bk = recent bookings, st = started}

local function burst_of(rate) return math.max(math.floor(rate * (P_BURST / SEC)), 1) end
local function window_of(c, rate) return c / rate * SEC end
local function p_bucket(rate, at)
  local c = burst_of(rate)
  return b_new(c, window_of(c, rate), at, 0)
end

local function p_start(nb, at)
  return { b = p_bucket(P_START, at), rate = P_START, ss = true, cr = P_START, chg = at,
           sb = nb, bk = {}, st = at }
end

local function p_set(p, rate, at)
  p.rate = math.max(rate, P_MIN)
  p.chg = at
  local lvl = b_level(p.b, at)
  local c = burst_of(p.rate)
  b_set_limit(p.b, c, window_of(c, p.rate), at)
  b_set_level(p.b, math.min(lvl, c), at)
end

local function p_booked(p, at)
  table.insert(p.bk, at)
  while #p.bk > 0 and at - p.bk[1] > P_MEASURE do table.remove(p.bk, 1) end
  if at - p.chg >= P_INTERVAL then
    local rate
    if p.ss then rate = p.rate * 2 else rate = p.rate + P_INCREASE * p.cr end
    p_set(p, rate, at)
  end
end

local function p_throttled(p, booking, nb, at)
  if booking == nil or booking < p.sb then return end
  local span = math.max(math.min(at - p.st, P_MEASURE), 1000)
  local achieved = #p.bk / (span / SEC)
  local rate = P_DECREASE * math.min(achieved, p.rate)
  p.ss = false
  p.cr = math.max(rate, P_MIN)
  p.sb = nb
  p_set(p, rate, at)
end

---------------------------------------------------------------------------------- key
-- {cfg = {rpm, tpm, rpd, tpd, aud}, st = {r, t, i, o}, pc = paced, gate, log = {{n, r, i, o,
--  at}}, nb = next booking, a = allowance, probe = a half-open probe is due}

local function part(c, d)
  if d == 'r' then return c.r end
  if d == 't' then return c.i + c.o end
  if d == 'i' then return c.i end
  return c.o
end

local function from_limits(l, a, at)
  local function b(v, w) if v then return b_new(v, w, at, a) end; return nil end
  return { cfg = { rpm = b(l.rpm, MINUTE), tpm = b(l.tpm, MINUTE), rpd = b(l.rpd, DAY),
                   tpd = b(l.tpd, DAY), aud = b(l.aud, HOUR) },
           st = {}, log = {}, nb = 0, a = a }
end

local function unconfigured(a) return { cfg = {}, st = {}, log = {}, nb = 0, a = a } end

local function buckets(S, c)
  local pb = nil
  if S.pc then pb = S.pc.b end
  return {
    { pb, c.r, 'requests' },
    { S.cfg.rpm, c.r, 'requests_per_minute' },
    { S.cfg.tpm, c.i + c.o, 'tokens_per_minute' },
    { S.cfg.rpd, c.r, 'requests_per_day' },
    { S.cfg.tpd, c.i + c.o, 'tokens_per_day' },
    { S.cfg.aud, c.a, 'audio_seconds_per_hour' },
  }
end

-- The wait for `c`, or nil and the limit it can never fit (dimension, cost, capacity).
local function k_wait(S, c, at)
  local wait = 0
  if S.gate and S.gate > at then wait = S.gate - at end
  for _, e in ipairs(buckets(S, c)) do
    local b, n, dim = e[1], e[2], e[3]
    if b then
      local w = b_peek(b, n, at)
      if w == nil then return nil, dim, n, math.floor(b.c) end
      wait = math.max(wait, w)
    end
  end
  for _, d in ipairs(DIMS) do
    local s = S.st[d]
    if s then
      local n = part(c, d)
      local w = s_wait(s, n, at)
      if w == nil then return nil, DIM_NAMES[d], n, math.floor(s.b.c) end
      wait = math.max(wait, w)
    end
  end
  return wait
end

local function any_stated(S) return S.st.r or S.st.t or S.st.i or S.st.o end

local function k_book(S, c, at)
  for _, e in ipairs(buckets(S, c)) do
    if e[1] then b_charge(e[1], e[2], at) end
  end
  for _, d in ipairs(DIMS) do
    local s = S.st[d]
    if s then s_charge(s, part(c, d), at) end
  end
  local booking = S.nb
  S.nb = S.nb + 1
  if S.pc then p_booked(S.pc, at) end
  if any_stated(S) then
    if #S.log >= MAX_LOG then table.remove(S.log, 1) end
    table.insert(S.log, { booking, c.r, c.i, c.o, at })
  end
  return booking
end

local function k_refund(S, requests, tokens, at)
  local function give(b, n)
    if b then
      if n >= 0 then b_refund(b, n, at) else b_charge(b, -n, at) end
    end
  end
  give(S.cfg.rpm, requests)
  give(S.cfg.rpd, requests)
  give(S.cfg.tpm, tokens)
  give(S.cfg.tpd, tokens)
end

-- What the bookings other than `booking` still in the log spend of each dimension: one pass,
-- nothing allocated (an answer is applied on every call: the log is as long as the requests
-- in flight plus the answers held back).
local function unanswered(S, booking)
  local r, i, o = 0, 0, 0
  for _, e in ipairs(S.log) do
    if e[1] ~= booking then r, i, o = r + e[2], i + e[3], o + e[4] end
  end
  return { r = r, t = i + o, i = i, o = o }
end

local function raise_gate(S, until_at)
  if not S.gate or until_at > S.gate then S.gate = until_at end
end

local PER = { m = MINUTE, d = DAY }

local function k_apply(S, report, booking, at)
  while #S.log > 0 and at - S.log[1][5] > MAX_AGE do table.remove(S.log, 1) end
  local flying = nil
  for _, d in ipairs(DIMS) do
    local w = report[d]
    if w then
      local skip = false
      if not S.st[d] then
        if not (w.limit and w.limit > 0) then
          if w.remaining == 0 and w.reset then raise_gate(S, at + math.max(w.reset, 0)) end
          skip = true
        else
          S.st[d] = s_new(w.limit, PER[w.per], S.a, at)
        end
      end
      if not skip then
        S.pc = nil
        local inflight = 0
        if booking then
          flying = flying or unanswered(S, booking)
          inflight = flying[d]
        end
        s_observe(S.st[d], w, booking, inflight, at)
      end
    end
  end
  if booking then
    for i = #S.log, 1, -1 do
      if S.log[i][1] == booking then table.remove(S.log, i) end
    end
  end
end

local function k_drain(S, dr, at)
  local function drains(window, named) return named and (dr.day or window <= SHORT) end
  for _, e in ipairs({ { S.cfg.rpm, dr.r }, { S.cfg.rpd, dr.r }, { S.cfg.tpm, dr.t },
                        { S.cfg.tpd, dr.t } }) do
    local b, named = e[1], e[2]
    if b and drains(b_window(b), named) then b_drain(b, at) end
  end
  -- A fixed window the refusal closed: nothing goes before its boundary (key_state.rs).
  local closed
  for _, d in ipairs(DIMS) do
    local s = S.st[d]
    if s and drains(s.lw, dr[d]) then
      local c = s_drain(s, at)
      if c and (not closed or c > closed) then closed = c end
    end
  end
  return closed
end

local function k_throttled(S, booking, at)
  if S.cfg.rpm or S.cfg.rpd or any_stated(S) then return end
  if not S.pc then S.pc = p_start(S.nb, at) else p_throttled(S.pc, booking, S.nb, at) end
end

local function k_token_room(S, at)
  local best = nil
  local function room(level, capacity)
    local r = math.floor(math.max(level - capacity / 2, 0))
    if not best or r < best then best = r end
  end
  for _, b in ipairs({ S.cfg.tpm or false, S.cfg.tpd or false }) do
    if b then room(b_level(b, at), math.floor(b.c)) end
  end
  for _, d in ipairs({ 't', 'i' }) do
    local s = S.st[d]
    if s then room(s_level(s, at), math.floor(s.b.c)) end
  end
  return best
end

local function rel(t) if t then return t - now end; return nil end

local function view_b(b, at)
  return { level = b_level(b, at), capacity = math.floor(b.c), window = b_window(b),
           reset = rel(b_full_at(b, at)) }
end
local function view_s(s, at)
  return { level = s_level(s, at), capacity = math.floor(s.b.c), window = s.lw,
           reset = rel(s_full_at(s, at)) }
end
local function lowest(list)
  local best = nil
  for _, v in ipairs(list) do
    if not best or v.level < best.level then best = v end
  end
  return best
end

local function k_binding(S, at)
  local req, tok = {}, {}
  -- Configured or stated only: a pace learned from 429s is learned_rate.
  for _, b in ipairs({ S.cfg.rpm or false, S.cfg.rpd or false }) do
    if b then table.insert(req, view_b(b, at)) end
  end
  if S.st.r then table.insert(req, view_s(S.st.r, at)) end
  for _, b in ipairs({ S.cfg.tpm or false, S.cfg.tpd or false }) do
    if b then table.insert(tok, view_b(b, at)) end
  end
  if S.st.t then table.insert(tok, view_s(S.st.t, at)) end
  return lowest(req), lowest(tok)
end

---------------------------------------------------------------------------------- storage

local function load()
  local raw = redis.call('GET', KEYS[1])
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

local function save(S)
  redis.call('SET', KEYS[1], cmsgpack.pack(S), 'PX', ttl)
end

local function none(l) return not (l.rpm or l.tpm or l.rpd or l.tpd or l.aud) end

-- A raise: a response's report, a 429's drain and gate, the tokens an answer gives back or
-- is charged, a probe's release. args: {gate (us from now), drain = {r, t, i, o, day},
-- report = {r, t, i, o}, booking, tokens_back, channel (where a new gate is announced)},
-- told at `at` (instants in it are from then).
local function k_raise(S, a, at)
  if a.report then k_apply(S, a.report, a.booking, at) end
  local d = a.drain
  local closed
  if d and (d.r or d.t or d.i or d.o) then
    k_throttled(S, a.booking, at)
    closed = k_drain(S, d, at)
  end
  if closed then raise_gate(S, closed) end
  if a.gate then
    raise_gate(S, at + math.max(a.gate, 0))
    S.probe = true
  end
  if (a.gate or closed) and a.channel then
    -- Tell every process: slots they booked before this gate are checked before they go.
    redis.call('PUBLISH', a.channel, KEYS[1])
  end
  if a.tokens_back and a.tokens_back ~= 0 then
    k_refund(S, 0, a.tokens_back, at)
  end
  if a.booking and redis.call('GET', KEYS[2]) == tostring(a.booking) then
    -- The probe's own answer: released (compare-and-delete). A success closes the half-open
    -- state; a throttled answer raised a new gate above, and the next probe comes after it.
    redis.call('DEL', KEYS[2])
    if not a.gate then S.probe = nil end
  end
end

-- The raises a caller held back (answers' reports, told with its next call on the key),
-- applied first, in the order they came, each at its own time (`ago` microseconds before
-- this call; a bucket another process moved since stays where it is): `S` made if there was
-- none.
local function apply_before(S)
  if not args.before then return S end
  S = S or unconfigured(allowance)
  for _, a in ipairs(args.before) do k_raise(S, a, now - math.max(a.ago or 0, 0)) end
  return S
end

---------------------------------------------------------------------------------- turns
-- A bulk request asks only for a slot it can use at once: interactive requests book ahead
-- and come first (the admission order). So that the lines of several processes do not all
-- ask at the instant the key frees up (one wins, the others ask again), a bulk ask that cannot
-- go now is promised a turn: the instant the buckets could pay for it after every turn
-- promised before it. A promise books nothing. A fresh bulk ask counts the promises; the
-- holder of one asks at its turn with its number and goes if the buckets can pay for it
-- alone; a grant promises the next request of the asker's line a turn the same way (so a
-- line under saturation asks once per request). A promise is forgotten PROMISE_GRACE after
-- its turn (its holder went elsewhere, its line ran dry, or its process died); a promise is
-- {id, at, r, i, o, a}.
local PROMISE_GRACE, MAX_PROMISES = 1 * SEC, 256

local function t_prune(S, at)
  if not S.tn then return end
  local keep = {}
  for _, p in ipairs(S.tn) do
    if p[2] + PROMISE_GRACE >= at then table.insert(keep, p) end
  end
  if #keep == 0 then S.tn = nil else S.tn = keep end
end

-- Takes promise `id` out: whether it was there.
local function t_take(S, id)
  if not (S.tn and id) then return false end
  for k, p in ipairs(S.tn) do
    if p[1] == id then
      table.remove(S.tn, k)
      if #S.tn == 0 then S.tn = nil end
      return true
    end
  end
  return false
end

-- Charges (sign 1) or gives back exactly (sign -1) `c` in every bucket, without the caps of
-- a refund: the promised turns, counted for a moment.
local function t_shift(S, c, sign, at)
  for _, e in ipairs(buckets(S, c)) do
    local b = e[1]
    if b then b_refill(b, at); b.l = b.l - sign * e[2] end
  end
  for _, d in ipairs(DIMS) do
    local s = S.st[d]
    if s then s_roll(s, at); b_refill(s.b, at); s.b.l = s.b.l - sign * part(c, d) end
  end
end

-- The wait for `c` after every turn promised.
local function t_wait(S, c, at)
  if not S.tn then return k_wait(S, c, at) end
  local total = { r = 0, i = 0, o = 0, a = 0 }
  for _, p in ipairs(S.tn) do
    total.r, total.i, total.o, total.a = total.r + p[3], total.i + p[4], total.o + p[5], total.a + p[6]
  end
  t_shift(S, total, 1, at)
  local wait = k_wait(S, c, at)
  t_shift(S, total, -1, at)
  return wait
end

-- Promises `c` a turn: its number and the wait until it.
local function t_promise(S, c, at)
  local wait = t_wait(S, c, at) or 0
  local id = (S.tk or 0) + 1
  S.tk = id
  S.tn = S.tn or {}
  if #S.tn >= MAX_PROMISES then table.remove(S.tn, 1) end
  table.insert(S.tn, { id, at + wait, c.r, c.i, c.o, c.a })
  return id, wait
end

---------------------------------------------------------------------------------- budgets
-- args.budget: {{cap, amount, keep (ms), seen}, …}, one per ledger, KEYS[3..] in the same
-- order; `seen` is what the caller last saw the ledger hold.

-- What ledger i holds. A ledger the caller saw and Redis no longer has (a restart without
-- its data, an eviction) is restored to what the caller last saw, never started from 0: a
-- lost ledger would otherwise allow its whole cap again.
local function ledger_held(i, c)
  local k = KEYS[2 + i]
  local v = redis.call('GET', k)
  if v then return tonumber(v) or 0 end
  if (c.seen or 0) > 0 then
    redis.call('SET', k, string.format('%.0f', c.seen), 'PX', string.format('%.0f', c.keep))
    return c.seen
  end
  return 0
end

-- The first charge its ledger cannot cover (0-based) and what the ledger holds, or nil.
local function over_budget()
  if not args.budget then return nil end
  for i, c in ipairs(args.budget) do
    local held = ledger_held(i, c)
    if held + c.amount > c.cap then return i - 1, held end
  end
  return nil
end

-- Books every charge: after a grant only, in the same call as the check. What each ledger
-- holds then, in order (nil without charges).
local function book_budget()
  if not args.budget then return nil end
  local held = {}
  for i, c in ipairs(args.budget) do
    local k = KEYS[2 + i]
    held[i] = redis.call('INCRBY', k, string.format('%.0f', c.amount))
    if redis.call('PTTL', k) < c.keep then
      redis.call('PEXPIRE', k, string.format('%.0f', c.keep))
    end
  end
  return held
end

---------------------------------------------------------------------------------- operations

if op == 'reserve' or op == 'turn' then
  -- args: {limits = {rpm, tpm, rpd, tpd, aud}, cost = {r, i, o, a}, max_wait, probe_ttl,
  --        probe_poll (ms), lost (the caller saw this state before: made anew, it starts empty),
  --        before (raises held back), restate (the report the caller last heard, for a
  --        state that is gone), share (answer a grant with the configured buckets' levels)}
  -- 'turn', a bulk ask (max_wait 0, see the turns above), also: turn (the number of the
  -- promise the caller holds).
  local is_turn = op == 'turn'
  local S = apply_before(load())
  local over, held = over_budget()
  if over then
    -- Nothing is booked anywhere; the raises held back are kept.
    if S and args.before then save(S) end
    return cjson.encode({ granted = false, over_budget = over, spent = held })
  end
  if not S and args.restate then
    -- What the caller last heard its provider state, told again: the state starts from it.
    S = unconfigured(allowance)
    k_raise(S, args.restate, now - math.max(args.restate.ago or 0, 0))
  end
  if not S then
    if none(args.limits) then
      if args.lost then
        -- The caller saw this key's state, learned from its provider's answers, and it is
        -- gone (Redis restarted without it): nothing is granted from an empty view, which
        -- would hand out what nobody stated. The caller tells what it last heard, and asks
        -- again.
        return cjson.encode({ granted = false, wait = 0, restate = true })
      end
      -- Unknown: nothing would be booked, so nothing is created (as in memory).
      return cjson.encode({ granted = true, wait = 0, booking = 0, budget_held = book_budget() })
    end
    S = from_limits(args.limits, allowance, now)
    if args.lost then
      -- The caller saw this key's state before and it is gone (Redis restarted without
      -- it): no bucket starts full, each fills from empty until a provider's answer states
      -- its level; a full one would hand out what nobody stated.
      for _, b in pairs(S.cfg) do b.l = 0 end
    end
  end
  local probe = false
  if S.probe and args.probe_ttl and S.gate and S.gate > now then
    -- Half-open is pending: no slot is booked across the gate (they would all go at its
    -- reset, with no probe first). Ask again when it has passed.
    save(S)
    return cjson.encode({ granted = false, wait = S.gate - now })
  end
  if S.probe and args.probe_ttl and not (S.gate and S.gate > now) then
    -- Half-open: the first reservation after the gate is the one probe across processes.
    local token = tostring(S.nb)
    if not redis.call('SET', KEYS[2], token, 'NX', 'PX', args.probe_ttl) then
      -- Another process's probe is out: look again soon (its answer releases it at once),
      -- or when its token expires, whichever comes first.
      local left = math.max(redis.call('PTTL', KEYS[2]), 1)
      local wait = math.min(left, args.probe_poll or left) * 1000
      save(S)
      return cjson.encode({ granted = false, wait = wait, probing = true })
    end
    probe = true
  end
  local wait, dim, n, capacity = k_wait(S, args.cost, now)
  if wait == nil then
    if probe then redis.call('DEL', KEYS[2]) end
    save(S)
    return cjson.encode({ too_large = true, dimension = dim, cost = n, capacity = capacity })
  end
  if is_turn then
    t_prune(S, now)
    local mine = t_take(S, args.turn)
    if not mine and S.tn then
      -- A fresh ask goes after the turns promised before it.
      wait = t_wait(S, args.cost, now)
    end
    if wait > 0 then
      if probe then redis.call('DEL', KEYS[2]) end
      local id, turn = t_promise(S, args.cost, now)
      save(S)
      return cjson.encode({ granted = false, wait = turn, turn = id })
    end
  elseif wait > args.max_wait then
    if probe then redis.call('DEL', KEYS[2]) end
    save(S)
    return cjson.encode({ granted = false, wait = wait })
  end
  local booking = k_book(S, args.cost, now)
  local out = { granted = true, wait = wait, booking = booking,
                token_room = k_token_room(S, now), probe = probe, budget_held = book_budget() }
  if args.share then
    -- The configured buckets' levels after this booking (negative: booked ahead), which the
    -- caller's local share follows: an outage starts it from its part of what is left.
    local levels = {}
    for name, b in pairs(S.cfg) do levels[name] = b_level(b, now) end
    out.levels = levels
  end
  if is_turn then
    out.turn, out.next = t_promise(S, args.cost, now)
  end
  save(S)
  return cjson.encode(out)
elseif op == 'refund' then
  -- args: {requests, tokens, before}
  local S = apply_before(load())
  if not S then return cjson.encode({}) end
  k_refund(S, args.requests, args.tokens, now)
  save(S)
  return cjson.encode({})
elseif op == 'raise' then
  -- args: those of k_raise, and before
  local S = apply_before(load()) or unconfigured(allowance)
  k_raise(S, args, now)
  save(S)
  return cjson.encode({})
elseif op == 'check' then
  -- args: {booking, probe_ttl, probe_poll, before}. Whether a slot booked earlier may still be
  -- used now: not during a gate raised since (a 429 or a breaker another process saw); after
  -- it, only as the one half-open probe (taken here if nobody holds it), never while another
  -- booking's probe is out.
  local S = apply_before(load())
  if not S then return cjson.encode({}) end
  if args.before then save(S) end
  if S.gate and S.gate > now then return cjson.encode({ wait = S.gate - now }) end
  if S.probe and args.probe_ttl then
    local token = tostring(args.booking)
    local holder = redis.call('GET', KEYS[2])
    if not holder then
      redis.call('SET', KEYS[2], token, 'NX', 'PX', args.probe_ttl)
    elseif holder ~= token then
      local left = math.max(redis.call('PTTL', KEYS[2]), 1)
      return cjson.encode({ wait = math.min(left, args.probe_poll or left) * 1000 })
    end
  end
  return cjson.encode({})
elseif op == 'peek' then
  -- args: {cost, before}
  local S = apply_before(load())
  if not S then return cjson.encode({ wait = 0 }) end
  local wait = k_wait(S, args.cost, now)
  local req, tok = k_binding(S, now)
  local out = { wait = wait, requests = req, tokens = tok, token_room = k_token_room(S, now) }
  if S.pc then out.learned_rate = S.pc.rate end
  if S.gate and S.gate > now then out.gate = S.gate - now end
  save(S)
  return cjson.encode(out)
end
return redis.error_reply('unknown operation ' .. tostring(op))
