
-- Many (appended to a script whose body was wrapped as the function
-- "one(KEYS, ARGV)", batchscripts.go): runs that script once per call
-- of a batch, in order, in one atomic step. ARGV[1] and ARGV[2] are the
-- number of keys and of arguments of each call; KEYS and the rest of
-- ARGV hold the calls' own, one after the other. Returns the calls'
-- answers in order (none may be nil, which would end the array).
local per_keys, per_args = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 0, (#ARGV - 2) / per_args - 1 do
	local keys, args = {}, {}
	for j = 1, per_keys do
		keys[j] = KEYS[i * per_keys + j]
	end
	for j = 1, per_args do
		args[j] = ARGV[2 + i * per_args + j]
	end
	out[i + 1] = one(keys, args)
end
return out
