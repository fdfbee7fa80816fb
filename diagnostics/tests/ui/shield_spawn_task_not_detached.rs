// `Shield::spawn` with a spawn closure that returns the task instead of detaching it: a
// dropped `async_executor::Task` cancels the work, so the closure must return `()`.
use loopguard::shield::Shield;

fn main() {
    let ex = async_executor::LocalExecutor::new();
    let shield = Shield::new("flush").unwrap();
    let _handle = shield.spawn(async { 1 }, |runner| ex.spawn(runner));
}
