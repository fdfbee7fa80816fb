// Shielded `Fallible` work whose error type is not `Debug`.
use loopguard::Fallible;
use loopguard::shield::Shield;

struct NotDebug;

fn main() {
    let shield = Shield::new("flush").unwrap();
    let _parts = shield.wrap(Fallible(async { Err::<u32, NotDebug>(NotDebug) }));
}
